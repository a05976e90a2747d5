"""The HTML report in a real browser: headless Chromium (Debian's `chromium`) opens the single
file with the network unreachable; every table and every image must be displayed.

Two views of the same file:
- `--dump-dom` of a copy with a tiny inline probe script (the report itself has no script): it
  writes, after the load event, how many <img> there are, how many loaded (complete,
  naturalWidth > 0) with a non-empty box, and how many tables have a non-empty box;
- `--screenshot` of the report as is: the picture is not blank (many colours, plot pixels).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from dashboards.report import build_report

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    # nothing outside the file may load: every host name resolves nowhere
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--proxy-server=127.0.0.1:9",
]

PROBE = """<script>
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.images);
  var shown = function (e) { var r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
  var ok = imgs.filter(function (i) { return i.complete && i.naturalWidth > 0 && shown(i); }).length;
  var tables = Array.prototype.slice.call(document.querySelectorAll('table'));
  var cells = document.querySelectorAll('td').length;
  document.title = 'PROBE images=' + imgs.length + ' loaded=' + ok + ' tables=' + tables.length +
                   ' shown=' + tables.filter(shown).length + ' cells=' + cells;
});
</script>"""


def chromium(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason="needs Debian's chromium at /usr/bin/chromium (apt-get install -y chromium; .ci/run installs it)"
)
def test_html_report_displays_every_table_and_image(store, tmp_path):
    rep = build_report(store.uri, "cmp", out_dir=tmp_path / "rep", log=False)
    page = rep.files["report.html"]
    text = page.read_text(encoding="utf-8")
    n_img = len(re.findall(r"<img\b", text))
    n_tables = len(re.findall(r"<table\b", text))
    assert n_img == len(rep.plots) >= 6 and n_tables >= 6
    assert "<script" not in text and not re.search(r"""(src|href|url)\s*[=(]\s*["']?(https?:)?//""", text)
    # the file stands alone: move it away from its PNGs
    alone = tmp_path / "alone" / "report.html"
    alone.parent.mkdir()
    shutil.copy(page, alone)

    probe = tmp_path / "probe.html"
    probe.write_text(text.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    out = chromium(tmp_path, "--virtual-time-budget=10000", "--dump-dom", probe.as_uri())
    m = re.search(r"<title>PROBE images=(\d+) loaded=(\d+) tables=(\d+) shown=(\d+) cells=(\d+)</title>", out.stdout)
    assert m, (out.stdout[-2000:], out.stderr[-2000:])
    images, loaded, tables, shown, cells = map(int, m.groups())
    assert images == loaded == n_img, m.group(0)
    assert tables == shown == n_tables and cells > 50, m.group(0)

    shot = tmp_path / "shot.png"
    out = chromium(tmp_path, "--window-size=1400,3000", f"--screenshot={shot}", alone.as_uri())
    assert shot.exists(), out.stderr[-2000:]
    import matplotlib.image

    px = (matplotlib.image.imread(shot)[..., :3] * 255).astype(np.uint8)
    assert px.shape[0] >= 2000 and px.shape[1] >= 1000
    non_white = (px < 245).any(axis=-1).mean()
    colours = len(np.unique(px.reshape(-1, 3)[::7], axis=0))
    assert non_white > 0.05 and colours > 200, (non_white, colours)  # text, table shading and plots, not a blank page
    # matplotlib's first two line colours (tab:blue, tab:orange) are on the page: the plots were drawn
    for rgb in ((31, 119, 180), (255, 127, 14)):
        assert (np.abs(px.astype(int) - rgb).sum(axis=-1) < 30).sum() > 200, rgb


WIDE_PROBE = """<script>
window.addEventListener('load', function () {
  var doc = document.documentElement;
  var wraps = Array.prototype.slice.call(document.querySelectorAll('.wrap'));
  var wide = wraps.filter(function (w) { return w.scrollWidth > w.clientWidth + 1; });
  var out = 'WIDE page=' + doc.scrollWidth + '/' + window.innerWidth + ' wraps=' + wraps.length + ' scrolling=' + wide.length;
  if (wide.length) {
    var w = wide[0], cell = w.querySelector('tbody td'), last = w.querySelector('tbody tr td:last-child');
    var left0 = cell.getBoundingClientRect().left - w.getBoundingClientRect().left;
    w.scrollLeft = w.scrollWidth;
    var left1 = cell.getBoundingClientRect().left - w.getBoundingClientRect().left;
    var lastRight = last.getBoundingClientRect().right - w.getBoundingClientRect().right;
    out += ' sticky=' + getComputedStyle(cell).position + ' left0=' + Math.round(left0) + ' left1=' + Math.round(left1) +
           ' lastRight=' + Math.round(lastRight);
  }
  document.title = out;
});
</script>"""


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium at /usr/bin/chromium")
def test_wide_tables_scroll_inside_the_page_with_their_first_column_frozen(tmp_path):
    """30 metric columns at 1600 px: the page itself never scrolls sideways; each wide table
    scrolls in its own box, and its first column stays in place when it does."""
    from ..sweepstore import Trial, fill

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    metrics = [f"ruler_avg/{1024 * (k + 1)}" for k in range(30)]
    trials = [
        Trial({"model.gate": g, "train.seed": s}, {m: 0.5 + 0.01 * k + 0.1 * (g != "none") + 0.003 * s for k, m in enumerate(metrics)})
        for g in ("none", "G1-elementwise", "G1-elementwise-very-long-label-of-a-variant")
        for s in (0, 1, 2)
    ]
    fill(uri, "wide", trials)
    rep = build_report(uri, "wide", out_dir=tmp_path / "rep", log=False, with_plots=False, metrics=metrics)
    page = rep.files["report.html"].read_text(encoding="utf-8")
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", WIDE_PROBE + "</body>"), encoding="utf-8")
    out = chromium(tmp_path, "--window-size=1600,2000", "--virtual-time-budget=10000", "--dump-dom", probe.as_uri())
    m = re.search(
        r"<title>WIDE page=(\d+)/(\d+) wraps=(\d+) scrolling=(\d+) sticky=(\w+) left0=(-?\d+) left1=(-?\d+) lastRight=(-?\d+)</title>",
        out.stdout,
    )
    assert m, (out.stdout[-2000:], out.stderr[-2000:])
    page_w, view_w, wraps, scrolling, sticky, left0, left1, last_right = m.groups()
    assert int(page_w) <= int(view_w), m.group(0)  # no sideways scroll of the page
    assert int(scrolling) >= 3 and sticky == "sticky", m.group(0)  # the wide tables scroll in their boxes
    assert int(left1) == int(left0), m.group(0)  # the first column did not move
    assert abs(int(last_right)) <= 2, m.group(0)  # scrolled to the end, the last column is in view
