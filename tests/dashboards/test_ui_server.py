"""`gatesweep ui` starts a real MLflow server on 127.0.0.1 over the test store and prints the
sweep's runs-table URL (model-training mode, the sweep's saved view) and its parent run's report
URL; its REST API lists the report artifacts on the parent run and serves the experiment's kind
and saved view as the UI reads them; Ctrl-C (SIGINT to the command) stops the server's whole
process group. Every process the test starts is stopped by pid. (The pages themselves, in a
real browser: test_ui_browser.py.)"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import psutil
import pytest

from dashboards.report import build_report
from dashboards.store import find_parent, open_client
from orchestrator.tracking import views
from tests.services.ports import free_port

pytestmark = pytest.mark.slow


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return json.loads(resp.read())


def test_ui_serves_the_report_artifacts_over_rest(store, tmp_path):
    build_report(store.uri, "cmp", out_dir=tmp_path / "rep", with_plots=True)
    cl = open_client(store.uri)
    parent, _ = find_parent(cl, "cmp")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "ui", "--port", str(port), "--tracking-uri", store.uri, "--sweep", "cmp"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        cwd=tmp_path,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(ln) for ln in proc.stdout], daemon=True).start()
    server: list[psutil.Process] = []
    seen: list[str] = []
    try:
        deadline = time.time() + 180
        while time.time() < deadline and not any(ln.startswith("Ctrl-C") for ln in seen):
            try:
                seen.append(lines.get(timeout=1))
            except queue.Empty:
                assert proc.poll() is None, "".join(seen)
        text = "".join(seen)
        base = f"http://127.0.0.1:{port}"
        assert f"MLflow UI: {base}" in text, text
        exp_id = parent.info.experiment_id
        table = f"{base}/#/experiments/{exp_id}/runs?viewStateShareKey=gatesweep-cmp&workflowType=machine_learning"
        assert re.search(rf"sweep cmp, runs table: {re.escape(table)}\s", text), text
        report = f"{base}/#/experiments/{exp_id}/runs/{parent.info.run_id}/artifacts/report/report.html?workflowType=machine_learning"
        assert re.search(rf"parent run, comparison report: {re.escape(report)}\s", text), text
        server = psutil.Process(proc.pid).children(recursive=True)
        assert server and all(p.is_running() for p in server)

        # listening on loopback only
        conns = [c for p in server for c in p.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
        assert conns and all(c.laddr.ip == "127.0.0.1" for c in conns), conns

        listing = get_json(f"{base}/api/2.0/mlflow/artifacts/list?run_id={parent.info.run_id}&path=report")
        files = {f["path"]: f for f in listing.get("files", [])}
        assert {"report/report.md", "report/report.html", "report/report.csv", "report/loss_curves.png"} <= set(files), listing
        assert all(int(files[p]["file_size"]) > 0 for p in files)
        exp = get_json(f"{base}/api/2.0/mlflow/experiments/get?experiment_id={exp_id}")
        assert exp["experiment"]["name"] == "dash"
        tags = {t["key"]: t["value"] for t in exp["experiment"].get("tags", [])}
        assert tags["mlflow.experimentKind"] == "custom_model_development"
        name, state = views.decode_view(tags["mlflow.sharedViewState.gatesweep-cmp"])
        assert name == "sweep cmp" and "gatesweep.in.cmp" in state["searchFilter"]

        os.kill(proc.pid, signal.SIGINT)  # what Ctrl-C sends
        assert proc.wait(timeout=60) == 0
        gone, alive = psutil.wait_procs(server, timeout=20)
        assert not alive, [p.pid for p in alive]
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0  # nothing listens any more
    finally:
        for p in [psutil.Process(proc.pid)] if proc.poll() is None else []:
            p.kill()
        for p in server:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
