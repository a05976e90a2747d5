"""`gatesweep ui` in a real browser, as a new user meets it: the quickstart sweep file run (in
smoke mode: every trial a few steps, its own sweep `quickstart-smoke`) into a fresh store
through the real CLI, then `gatesweep ui --sweep quickstart-smoke`, and each URL it prints opened
in Debian's headless Chromium through the DevTools protocol (tests/dashboards/cdp.py).

- the runs-table URL renders MLflow's model-training runs page (not the GenAI overview), lists
  every child run of the sweep by name (no collapsed parent), and shows each run's first-token
  attention, the value the store holds, in the `first_token_attn` column beside the gate and
  seed columns; the runs come grouped by arm (the varied axes but the seed): one group row per
  gate arm holding its five seeds, with their mean, each group in a colour of its own, the one
  gatesweep computed; its chart view opens on the headline section, whose bars are the groups'
  means in the groups' colours and whose curves have min/max bands, with no chart of a metric
  that is the same in every trial;
- the parent-run URL renders the parent's page with the comparison report (written at the
  sweep's end) displayed: its Δ table and seeds-needed lines; the parent's overview shows its
  description's link to the report and its per-configuration metrics.

Screenshots of the four pages are kept in $GATESWEEP_TEST_ARTIFACTS (default
`.gatesweep/test-artifacts/ui-browser/` in the checkout). Every process started is stopped by
pid or process group and checked gone; nothing listens beyond 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from orchestrator.tracking import client, names, views
from tests.services.ports import free_port
from tests.support.cli import gatesweep

from .cdp import CHROMIUM, Browser

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(),
        reason="needs Debian's chromium at /usr/bin/chromium (apt-get install -y chromium; .ci/run installs it)",
    ),
]

REPO = Path(__file__).resolve().parents[2]
SWEEP = "quickstart-smoke"


def artifact_dir() -> Path:
    out = Path(os.environ.get("GATESWEEP_TEST_ARTIFACTS") or REPO / ".gatesweep" / "test-artifacts") / "ui-browser"
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory, shared_ray):
    root = tmp_path_factory.mktemp("quickstart-store")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    out = gatesweep(
        "run",
        str(REPO / "sweeps" / "quickstart.yaml"),
        "--smoke",
        "--runs-dir",
        str(root / "runs"),
        "--tracking-uri",
        uri,
        "--address",
        shared_ray,
        cwd=root,
        timeout=900,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert (
        "runs table: `gatesweep ui --sweep quickstart-smoke" in out.stdout and "viewStateShareKey=gatesweep-quickstart-smoke" in out.stdout
    )
    assert "report: " in out.stdout, out.stdout
    return root, uri, out.stdout


@pytest.fixture(scope="module")
def ui(quickstart):
    root, uri, _ = quickstart
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "ui", "--port", str(port), "--tracking-uri", uri, "--sweep", SWEEP],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        cwd=root,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(ln) for ln in proc.stdout], daemon=True).start()
    seen: list[str] = []
    server: list[psutil.Process] = []
    try:
        deadline = time.time() + 180
        while time.time() < deadline and not any(ln.startswith("Ctrl-C") for ln in seen):
            try:
                seen.append(lines.get(timeout=1))
            except queue.Empty:
                assert proc.poll() is None, "".join(seen)
        text = "".join(seen)
        table = re.search(rf"sweep {SWEEP}, runs table: (\S+)", text)
        report = re.search(r"parent run, comparison report: (\S+)", text)
        assert table and report, text
        server = psutil.Process(proc.pid).children(recursive=True)
        listening = [c for p in server for c in p.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
        assert listening and all(c.laddr.ip == "127.0.0.1" for c in listening), listening
        yield table.group(1), report.group(1)
        os.kill(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        _, alive = psutil.wait_procs(server, timeout=20)
        assert not alive, [p.pid for p in alive]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for p in server:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass


def store_runs(uri: str):
    cl = client(uri)
    exp = cl.get_experiment_by_name("quickstart")
    parent = cl.search_runs([exp.experiment_id], f"tags.`{names.KIND_TAG}` = 'sweep' and tags.`{names.SWEEP_TAG}` = '{SWEEP}'")[0]
    children = cl.search_runs([exp.experiment_id], f"tags.`{names.PARENT_TAG}` = '{parent.info.run_id}'", max_results=1000)
    return cl, exp, parent, children


TRACES_JS = """(() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(p => ({
  title: (p.closest('[data-testid]') || p.parentElement.parentElement.parentElement).innerText.split('\\n')[0],
  traces: (p.data || []).map(t => ({
    type: t.type, fill: t.fill || null, y: Array.from(t.y || []).map(String), x: Array.from(t.x || []).map(Number),
    color: (t.marker && t.marker.color) || (t.line && t.line.color) || null,
  })),
})))()"""

ROWS_JS = """(() => {
  const rows = {};
  for (const cell of document.querySelectorAll('.ag-row .ag-cell[col-id]')) {
    const i = cell.closest('.ag-row').getAttribute('row-index');
    (rows[i] = rows[i] || {})[cell.getAttribute('col-id')] = cell.innerText.trim();
  }
  return JSON.stringify(rows);
})()"""


def test_runs_table_and_parent_report_in_a_real_browser(quickstart, ui):
    import json

    root, uri, _ = quickstart
    table_url, report_url = ui
    cl, exp, parent, children = store_runs(uri)
    assert exp.tags[views.EXPERIMENT_KIND_TAG] == views.TRAINING_KIND
    expected = {r.info.run_name: r.data.metrics["first_token_attn"] for r in children}
    assert len(expected) == 20  # 4 gate arms x 5 seeds
    shots = artifact_dir()
    base_tmp = root / "chromium"

    async def scenario():
        async with Browser(base_tmp / "profile", 1920, 1080) as browser:
            page = await browser.new_page()
            await page.goto(table_url)
            n = len(expected)
            await page.wait_for(f"document.querySelectorAll('.ag-center-cols-container .ag-row').length >= {n}", timeout=120)
            await page.wait_for("document.querySelector('.ag-cell[col-id=\"metrics.`first_token_attn`\"]') !== null")
            await asyncio.sleep(1.0)  # let the grid settle its columns
            title = await page.evaluate("document.title")
            body = await page.evaluate("document.body.innerText")
            rows = json.loads(await page.evaluate(ROWS_JS))
            hash_ = await page.evaluate("location.hash")
            await page.screenshot(shots / "runs_table.png")

            await page.goto(table_url + "&compareRunsMode=CHART")
            await page.wait_for(f"document.body.innerText.includes({json.dumps(views.HEADLINE_SECTION)})", timeout=60)
            await page.wait_for("document.querySelectorAll('.js-plotly-plot').length >= 3", timeout=90)
            await asyncio.sleep(1.5)
            charts_text = await page.evaluate("document.body.innerText")
            traces = await page.evaluate(TRACES_JS)
            await page.screenshot(shots / "runs_charts.png")
            await page.evaluate(
                "(() => { const e = Array.from(document.querySelectorAll('*')).find(e => e.children.length === 0 && "
                "(e.innerText || '').trim() === 'Model metrics'); if (e) e.scrollIntoView(); })()"
            )
            await page.wait_for(
                "Array.from(document.querySelectorAll('.js-plotly-plot')).some(p => (p.data || []).some(t => t.fill))", timeout=60
            )
            await asyncio.sleep(1.5)
            traces += await page.evaluate(TRACES_JS)
            await page.screenshot(shots / "runs_curves.png")

            await page.goto(report_url)
            await page.wait_for("document.querySelector('iframe.mlflow-html-iframe') !== null", timeout=90)
            frames: list[str] = []
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not any("Seeds needed" in t for t in frames):
                await asyncio.sleep(1.0)
                frames = await page.frame_texts()
            report_page = await page.evaluate("document.body.innerText")
            await page.screenshot(shots / "parent_report.png")

            await page.goto(views.run_url(table_url.split("/#/")[0], exp.experiment_id, parent.info.run_id))
            await page.wait_for("document.body.innerText.includes('Comparison report')", timeout=60)
            await page.wait_for("document.body.innerText.includes('first_token_attn/none')", timeout=60)
            overview = await page.evaluate("document.body.innerText")
            links = await page.evaluate("Array.from(document.querySelectorAll('a')).map(a => a.getAttribute('href') || '')")
            await page.screenshot(shots / "parent_overview.png")
            return title, body, rows, hash_, charts_text, traces, frames, report_page, overview, links

    title, body, rows, hash_, charts_text, traces, frames, report_page, overview, links = asyncio.run(scenario())

    # the training runs view, not the GenAI overview
    assert title.startswith("Runs - Experiment"), title
    assert hash_.startswith(f"#/experiments/{exp.experiment_id}/runs"), hash_
    assert "No data available" not in body and f"{len(expected)} matching runs" in body
    # every child run by name, in one group per arm (its five seeds), with the value of its first-token attention
    named = [(re.match(r"^(#[0-9a-f]{6})?\s*(.*)$", r.get("attributes.`Run Name`", ""), re.S).groups(), r) for r in rows.values()]
    by_name = {name: r for (_, name), r in named if not name.startswith("Group: ")}
    groups = {re.match(r"Group: (.+)\n(\d+)$", name).groups(): (colour, r) for (colour, name), r in named if name.startswith("Group: ")}
    assert set(by_name) == set(expected), sorted(by_name)
    key = views.group_key(SWEEP, {re.match(r"(.+)-s\d+$", n).group(1) for n in expected})
    assert {g: int(n) for g, n in groups} == {re.match(r"(.+)-s\d+$", n).group(1): 5 for n in expected}
    colours = {g: colour for (g, _), (colour, _) in groups.items()}
    assert colours == {g: views.group_colour(key, g) for g in colours} and len(set(colours.values())) == 4, colours
    for (g, _), (_, row) in groups.items():  # the group row is its seeds' mean
        mean = np.mean([v for n, v in expected.items() if n.startswith(f"{g}-s")])
        shown = row["metrics.`first_token_attn`"]
        assert shown.endswith("(average)") and float(shown.split()[0]) == pytest.approx(mean, rel=1e-6), (g, shown, mean)
    assert all(cl.get_run(r.info.run_id).data.tags[names.RUN_COLOR_TAG] == colours[r.data.tags[key]] for r in children)
    for name, value in expected.items():
        shown = by_name[name]["metrics.`first_token_attn`"]
        assert float(shown) == pytest.approx(value, rel=1e-6), (name, shown, value)
        gate, seed = re.match(r"(.+)-s(\d+)$", name).groups()
        assert by_name[name]["tags.`gatesweep.gate`"] == gate and by_name[name]["params.`train.seed`"] == seed
    assert parent.info.run_name not in by_name  # the parent is not a row to compare
    # the chart view opens on the headline section, with the sink's metric first among its charts
    assert views.HEADLINE_SECTION in charts_text and "first_token_attn" in charts_text
    assert charts_text.index(views.HEADLINE_SECTION) < charts_text.index("Model metrics")
    # the charts show the groups: a bar of each group's mean in its colour, curves with min/max bands
    uuids = {views.group_uuid(key, g): g for g in colours}
    bars = [t for c in traces for t in c["traces"] if t["type"] == "bar" and set(t["y"]) == set(uuids)]
    assert bars, [c["title"] for c in traces]
    bar = next(t for c in traces for t in c["traces"] if c["title"] == "first_token_attn" and t["type"] == "bar")
    for uuid, x, colour in zip(bar["y"], bar["x"], bar["color"]):
        g = uuids[uuid]
        assert colour == colours[g] and x == pytest.approx(np.mean([v for n, v in expected.items() if n.startswith(f"{g}-s")]), rel=1e-6)
    bands = [t for c in traces for t in c["traces"] if t["type"] == "scatter" and t["fill"]]
    lines = {t["color"] for c in traces for t in c["traces"] if t["type"] == "scatter" and not t["fill"]}
    assert bands and set(colours.values()) <= lines, (len(bands), lines)
    # no chart of a metric that is the same in every trial (no spikes in a few steps): the headline
    # section holds the bars of the others
    finals = {k: [r.data.metrics.get(k) for r in children] for k in views.table_metrics({k for r in children for k in r.data.metrics})}
    constant = views.constant_metrics({k: [v for v in vs if v is not None] for k, vs in finals.items()})
    assert "loss_spikes" in constant
    shown = re.search(re.escape(views.HEADLINE_SECTION) + r"\s*\((\d+)\)", charts_text)
    assert shown and int(shown.group(1)) == len(finals) - len(constant), (shown, sorted(constant))

    # the parent run's page shows the comparison report
    assert any(f"Sweep {SWEEP}" in t and "Δ against the baseline" in t and "Seeds needed" in t for t in frames), [t[:300] for t in frames]
    report = next(t for t in frames if "Seeds needed" in t)
    for gate in {re.match(r"(.+)-s\d+$", n).group(1) for n in expected}:
        assert gate in report
    assert "report/report.html" in report_page
    assert "Comparison report" in overview and any("artifacts/report/report.html" in h for h in links)
    assert "first_token_attn/G1-elementwise" in overview

    # the screenshots are pictures of something: many colours, not a blank page
    import matplotlib.image

    for name in ("runs_table.png", "runs_charts.png", "runs_curves.png", "parent_report.png", "parent_overview.png"):
        px = (matplotlib.image.imread(shots / name)[..., :3] * 255).astype(np.uint8)
        assert px.shape[:2] == (1080, 1920), name
        assert len(np.unique(px.reshape(-1, 3)[::5], axis=0)) > 50, name
    shutil.rmtree(base_tmp, ignore_errors=True)
    # chromium is gone: nothing the test started still runs
    assert not [p for p in psutil.process_iter(["cmdline"]) if str(base_tmp) in " ".join(p.info["cmdline"] or [])]
