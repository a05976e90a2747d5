"""The pictures of the docs (docs/img/), made by the real programs, never by hand:

- `mlflow-runs-grouped.png`, `mlflow-runs-charts.png`: `gatesweep ui --sweep hello` in Debian's
  headless Chromium (the DevTools driver the browser tests use, tests/dashboards/cdp.py): the
  sweep's runs table grouped by arm, and its chart view;
- `report-html.png`: the top of the report.html the end of that sweep wrote;
- `quickstart-attention-maps.png`, `quickstart-gate-histograms.png`: two plots of the quickstart's
  report (`--quickstart-report FOLDER`, a report folder of `sweeps/quickstart.yaml`; without it
  they are left as they are).

    .venv/bin/python docs/screenshots.py                        # runs sweeps/hello.yaml (4 trials) into a temporary store
    .venv/bin/python docs/screenshots.py --hello-root DIR       # reuse a folder where hello ran (DIR/mlflow.db, DIR/runs)
    .venv/bin/python docs/screenshots.py --check                # exit 1 naming the pictures whose code changed

`docs/img/screenshots.json` records each picture's hash and the hashes of the files that draw it
(`SOURCES`); `tests/test_docs.py` fails when one of those files changed since the picture was
made, or when a picture is not the one recorded, naming this script.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
IMG = DOCS / "img"
MANIFEST = IMG / "screenshots.json"
REFRESH = ".venv/bin/python docs/screenshots.py"
MLFLOW_VIEW_SOURCES = [f"orchestrator/tracking/views/{m}.py" for m in ("chart_view", "groups", "links", "saved")]
MLFLOW_VIEW_SOURCES += ["sweeps/hello.yaml", "docs/screenshots.py"]
"""What the two MLflow pictures are drawn from: the saved view's modules, the sweep, this script."""
SOURCES: dict[str, list[str]] = {
    "mlflow-runs-grouped.png": MLFLOW_VIEW_SOURCES,
    "mlflow-runs-charts.png": MLFLOW_VIEW_SOURCES,
    "report-html.png": [
        "dashboards/html.py",
        "dashboards/cells.py",
        "dashboards/sections/__init__.py",
        "dashboards/sections/tables.py",
        "dashboards/sections/writers.py",
        "sweeps/hello.yaml",
        "docs/screenshots.py",
    ],
    "quickstart-attention-maps.png": [
        "orchestrator/plots/draw.py",
        "orchestrator/plots/figure.py",
        "dashboards/sections/plots.py",
        "sweeps/quickstart.yaml",
    ],
    "quickstart-gate-histograms.png": [
        "orchestrator/plots/draw.py",
        "orchestrator/plots/figure.py",
        "dashboards/sections/plots.py",
        "sweeps/quickstart.yaml",
    ],
}
"""Picture -> the files whose change makes it stale (the code that draws it, the sweep it shows)."""
QUICKSTART_PLOTS = {"quickstart-attention-maps.png": "attention_maps.png", "quickstart-gate-histograms.png": "gate_histograms.png"}


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def stale(manifest: Path = MANIFEST) -> list[str]:
    """The pictures that are missing, not the recorded file, or drawn by a file that changed since."""
    try:
        recorded = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return sorted(SOURCES)
    out = []
    for name, sources in SOURCES.items():
        entry = recorded.get(name) or {}
        picture = manifest.parent / name
        if (
            not picture.is_file()
            or entry.get("sha256") != sha(picture)
            or any(entry.get("sources", {}).get(s) != sha(ROOT / s) for s in sources)
        ):
            out.append(name)
    return out


def record(names: list[str], note: str) -> None:
    """Write the manifest entries of `names` (the others kept)."""
    try:
        manifest = json.loads(MANIFEST.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        manifest = {}
    for name in names:
        manifest[name] = {"sha256": sha(IMG / name), "sources": {s: sha(ROOT / s) for s in SOURCES[name]}, "made": note}
    MANIFEST.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def cli(*args: str, cwd: Path, log: Path | None = None) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=cwd, capture_output=True, text=True)
    if log is not None:
        log.write_text(out.stdout + out.stderr)
    if out.returncode != 0:
        raise SystemExit(f"gatesweep {' '.join(args)} failed ({out.returncode}):\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_ui(root: Path, uri: str) -> tuple[subprocess.Popen, str]:
    """`gatesweep ui --sweep hello` on a free port; (its process, the runs-table URL)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "ui", "--port", str(free_port()), "--tracking-uri", uri, "--sweep", "hello"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=root,
        start_new_session=True,
    )
    seen = ""
    deadline = time.time() + 240
    while time.time() < deadline:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line and proc.poll() is not None:
            break
        seen += line
        found = re.search(r"sweep hello, runs table: (\S+)", seen)
        if found and "Ctrl-C" in seen:
            return proc, found.group(1)
    os.killpg(proc.pid, signal.SIGKILL)
    raise SystemExit(f"gatesweep ui did not come up:\n{seen[-2000:]}")


async def shoot(table_url: str, report: Path, profile: Path) -> None:
    from tests.dashboards.cdp import Browser

    async with Browser(profile, 1400, 860) as browser:
        page = await browser.new_page()
        await page.goto(table_url)
        await page.wait_for("document.querySelectorAll('.ag-center-cols-container .ag-row').length >= 4", timeout=180)
        await asyncio.sleep(2.0)  # the grid settles its columns
        await page.screenshot(IMG / "mlflow-runs-grouped.png")
        await page.goto(table_url + "&compareRunsMode=CHART")
        await page.wait_for("document.querySelectorAll('.js-plotly-plot').length >= 3", timeout=120)
        await asyncio.sleep(2.5)
        await page.screenshot(IMG / "mlflow-runs-charts.png")
    async with Browser(profile, 1200, 1400) as browser:
        page = await browser.new_page()
        await page.goto(report.as_uri())
        await page.wait_for("document.querySelector('#configurations') !== null", timeout=60)
        await asyncio.sleep(1.0)
        await page.screenshot(IMG / "report-html.png")


def hello_store(root: Path | None, work: Path) -> tuple[Path, str]:
    """A folder where sweeps/hello.yaml ran (`root`, or a new one, run now) and its store's URI."""
    if root is None:
        root = work / "hello"
        root.mkdir()
        uri = f"sqlite:///{root / 'mlflow.db'}"
        print("running sweeps/hello.yaml (4 trials, a few minutes)...", flush=True)
        cli(
            "run",
            str(ROOT / "sweeps" / "hello.yaml"),
            "--tracking-uri",
            uri,
            "--runs-dir",
            str(root / "runs"),
            cwd=root,
            log=work / "run.log",
        )
    uri = f"sqlite:///{Path(root) / 'mlflow.db'}"
    cli("report", "hello", "--tracking-uri", uri, "--no-log", cwd=root)  # report.html as the code draws it now
    return root, uri


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="docs/screenshots.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 naming the stale pictures")
    parser.add_argument("--hello-root", type=Path, help="a folder where sweeps/hello.yaml ran (mlflow.db, runs/)")
    parser.add_argument("--quickstart-report", type=Path, help="a report folder of sweeps/quickstart.yaml (its plots are copied)")
    args = parser.parse_args(argv)
    if args.check:
        old = stale()
        for name in old:
            print(f"docs/img/{name} is stale; run {REFRESH}", file=sys.stderr)
        return 1 if old else 0
    IMG.mkdir(exist_ok=True)
    made = []
    if args.quickstart_report is not None:
        for name, plot in QUICKSTART_PLOTS.items():
            shutil.copyfile(args.quickstart_report / plot, IMG / name)
        made += list(QUICKSTART_PLOTS)
    with tempfile.TemporaryDirectory(prefix="gatesweep-screenshots-") as tmp:
        work = Path(tmp)
        root, uri = hello_store(args.hello_root, work)
        proc, table_url = start_ui(root, uri)
        try:
            asyncio.run(shoot(table_url, root / "runs" / "sweeps" / "hello" / "report" / "report.html", work / "chromium"))
        finally:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
    made += ["mlflow-runs-grouped.png", "mlflow-runs-charts.png", "report-html.png"]
    record(made, time.strftime("%Y-%m-%d"))
    for name in made:
        print(f"wrote docs/img/{name}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))  # the repository's packages and tests/dashboards/cdp.py
    sys.exit(main())
