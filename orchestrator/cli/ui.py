"""`gatesweep ui`: the MLflow UI on 127.0.0.1 over the same store as `run` and `report`.

Starts `mlflow server` bound to 127.0.0.1 (`orchestrator.tracking.ui_server`), waits until it answers, and prints, per sweep, the URL of its runs table
(MLflow's model-training runs page in the sweep's saved view: every trial listed by name, the
varied axes and the headline metrics as columns, the chart view laid out) and of its parent
run's comparison report (`report/report.html`, written at the sweep's end and by `gatesweep
report`). Ctrl-C stops the server it started, by process group. Never creates a store; for a
sweep launched before saved views existed it adds the view and the experiment's kind tag (the
UI's own settings; a store that refuses the write still gets its URLs).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from dashboards.links import sweep_links
from dashboards.store import StoreError, check_store
from orchestrator.core.errors import UserError

from ..tracking import names, redact_uri, scheme_of, views
from ..tracking.ui_server import HOST, has_password, port_free, server_command, server_env, stop, wait_until_up
from .commands import COMMAND_TABLE
from .common import tracking_uri


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "ui",
        help=COMMAND_TABLE["ui"].help,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--port", type=int, default=5000, help="port on 127.0.0.1 (default: 5000)")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: MLFLOW_TRACKING_URI, else sqlite:///./mlflow.db)")
    p.add_argument("--sweep", help="print the URL of this sweep's experiment and parent run (default: those of the 10 newest sweeps)")
    return p


def print_links(base: str, links: list[tuple[str, str, str]]) -> None:
    """Per sweep: its runs table and its parent run's comparison report."""
    for name, exp_id, run_id in links:
        print(f"  sweep {name}, runs table: {views.runs_url(base, exp_id, name)}", flush=True)
        print(f"    parent run, comparison report: {views.run_url(base, exp_id, run_id, f'{names.REPORT_DIR}/report.html')}", flush=True)
    if not links:
        print("  no sweeps in this store yet", flush=True)


def run(args) -> int:
    if not 1 <= args.port <= 65535:
        raise UserError(f"--port: got {args.port}; allowed: 1..65535")
    uri = tracking_uri(args.tracking_uri)  # a server that does not answer is an error here, in one line
    if scheme_of(uri) in ("http", "https"):
        try:
            remote = sweep_links(uri, args.sweep)  # an error of the server's reaches the CLI's one line
        except StoreError as err:
            raise UserError(str(err)) from None
        print(f"the store is already an MLflow server: open {redact_uri(uri)}")
        print_links(redact_uri(uri), remote)
        return 0
    try:
        check_store(uri)
        links = sweep_links(uri, args.sweep)
    except StoreError as err:
        raise UserError(str(err)) from None
    if not port_free(args.port):
        raise UserError(f"--port: {HOST}:{args.port} is in use; pick another port with --port")

    base = f"http://{HOST}:{args.port}"
    env, dropped = server_env(dict(os.environ))
    if has_password(uri):
        env["MLFLOW_BACKEND_STORE_URI"] = uri  # `mlflow server`'s own variable for --backend-store-uri
    if dropped:
        print(
            f"gatesweep: warning: ignoring {', '.join(dropped)} from the environment: gatesweep ui sets the MLflow server's "
            f"options itself and listens on {HOST} only",
            file=sys.stderr,
        )
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
        print_links(base, links)
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
