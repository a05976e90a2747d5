"""`gatesweep ui`: the MLflow UI on 127.0.0.1 over the same store as `run` and `report`.

Starts `mlflow server` bound to 127.0.0.1 (one worker, background job execution off, so it
answers in seconds), waits until it answers, and prints the URL of the sweep's experiment and
parent run (whose `report/` artifacts hold the comparison written by `gatesweep report`).
Ctrl-C stops the server it started, by process group. Never creates a store.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from .common import UserError, tracking_uri

HOST = "127.0.0.1"
START_TIMEOUT_S = 120.0


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "ui",
        help="start the MLflow UI on 127.0.0.1 over the sweep store",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--port", type=int, default=5000, help="port on 127.0.0.1 (default: 5000)")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: MLFLOW_TRACKING_URI, else sqlite:///./mlflow.db)")
    p.add_argument("--sweep", help="print the URL of this sweep's experiment and parent run (default: those of the 10 newest sweeps)")
    return p


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def server_command(uri: str, port: int) -> list[str]:
    from ..tracking import artifacts_folder

    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri, "--host", HOST, "--port", str(port), "--workers", "1"]
    folder = artifacts_folder(uri)
    if folder is not None:  # artifacts uploaded through the UI go beside the database, as the sweeps' do
        cmd += ["--artifacts-destination", str(folder)]
    return cmd


def wait_until_up(proc: subprocess.Popen, base: str, timeout: float = START_TIMEOUT_S) -> bool:
    """Poll /health until the server answers; False when it exits or the time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=2) as resp:
                if resp.status == 200:
                    return True
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        time.sleep(0.3)
    return False


def stop(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    """Stop the server's whole process group (it was started in its own session)."""
    if proc.poll() is not None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=timeout)
            return
        except subprocess.TimeoutExpired:
            continue


def sweep_links(uri: str, sweep: str | None) -> list[tuple[str, str, str]]:
    """(label, experiment id, parent run id) of the named sweep, or of the newest few sweeps."""
    from dashboards.store import experiment_ids, find_parent, open_client, sweep_parents

    cl = open_client(uri)
    if sweep:
        run, _ = find_parent(cl, sweep)
        return [(sweep, run.info.experiment_id, run.info.run_id)]
    newest = sweep_parents(cl, experiment_ids(cl))
    return [(name, run.info.experiment_id, run.info.run_id) for name, run in newest.items()][:10]


def run(args) -> int:
    from dashboards.store import StoreError, check_store

    from ..tracking import redact_uri, scheme_of

    if not 1 <= args.port <= 65535:
        raise UserError(f"--port: got {args.port}; allowed: 1..65535")
    uri = tracking_uri(args.tracking_uri)
    if scheme_of(uri) in ("http", "https"):
        print(f"the store is already an MLflow server: open {redact_uri(uri)}")
        return 0
    try:
        check_store(uri)
        links = sweep_links(uri, args.sweep)
    except StoreError as err:
        raise UserError(str(err)) from None
    if not port_free(args.port):
        raise UserError(f"--port: {HOST}:{args.port} is in use; pick another port with --port")

    base = f"http://{HOST}:{args.port}"
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    log = tempfile.NamedTemporaryFile(prefix="gatesweep-ui-", suffix=".log", delete=False)  # noqa: SIM115 (open for the server's life; closed in finally)
    proc = subprocess.Popen(
        server_command(uri, args.port), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True
    )
    # Ctrl-C and SIGTERM both stop the server (SIGINT is set explicitly: a shell's background
    # job inherits it ignored)
    previous = {sig: signal.signal(sig, _raise_interrupt) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        print(f"starting the MLflow UI on {base} over {redact_uri(uri)} (server pid {proc.pid}) ...", flush=True)
        if not wait_until_up(proc, base):
            tail = Path(log.name).read_text(errors="replace").strip().splitlines()[-15:]
            print("gatesweep: error: the MLflow server did not start:\n  " + "\n  ".join(tail), file=sys.stderr)
            return 1
        print(f"MLflow UI: {base}", flush=True)
        for name, exp_id, run_id in links:
            print(
                f"  sweep {name}: {base}/#/experiments/{exp_id}   (parent run, report/ artifacts: "
                f"{base}/#/experiments/{exp_id}/runs/{run_id})",
                flush=True,
            )
        if not links:
            print("  no sweeps in this store yet", flush=True)
        print("Ctrl-C stops the server.", flush=True)
        proc.wait()
        print(f"gatesweep: the MLflow server exited with status {proc.returncode}; log: {log.name}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nstopping the MLflow UI ...", flush=True)
        return 0
    finally:
        stop(proc)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        log.close()
        if proc.returncode is not None and proc.returncode <= 0:
            Path(log.name).unlink(missing_ok=True)


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt
