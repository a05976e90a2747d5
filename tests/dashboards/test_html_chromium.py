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
