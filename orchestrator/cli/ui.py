"""`gatesweep ui`: the MLflow UI on 127.0.0.1 over the same store as `run` and `report`.

Starts `mlflow server` bound to 127.0.0.1 (one worker, background job execution off, so it
answers in seconds), waits until it answers, and prints, per sweep, the URL of its runs table
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
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

from dashboards.store import StoreError, check_store, experiment_ids, find_parent, open_client, sweep_parents
from orchestrator.core.errors import UserError

from ..tracking import artifacts_folder, names, redact_uri, scheme_of, search_all, views
from .commands import COMMAND_TABLE
from .common import tracking_uri

HOST = "127.0.0.1"
START_TIMEOUT_S = 120.0
SERVER_OPTION_ENV = (
    "MLFLOW_BACKEND_STORE_URI",
    "MLFLOW_READ_REPLICA_BACKEND_STORE_URI",
    "MLFLOW_REGISTRY_STORE_URI",
    "MLFLOW_DEFAULT_ARTIFACT_ROOT",
    "MLFLOW_SERVE_ARTIFACTS",
    "MLFLOW_ARTIFACTS_ONLY",
    "MLFLOW_ARTIFACTS_DESTINATION",
    "MLFLOW_HOST",
    "MLFLOW_PORT",
    "MLFLOW_WORKERS",
    "MLFLOW_STATIC_PREFIX",
    "MLFLOW_SERVER_ALLOWED_HOSTS",
    "MLFLOW_SERVER_CORS_ALLOWED_ORIGINS",
    "MLFLOW_SERVER_DISABLE_SECURITY_MIDDLEWARE",
    "MLFLOW_SERVER_X_FRAME_OPTIONS",
    "MLFLOW_GUNICORN_OPTS",
    "MLFLOW_UVICORN_OPTS",
    "MLFLOW_WAITRESS_OPTS",
    "MLFLOW_EXPOSE_PROMETHEUS",
    "MLFLOW_TRACE_ARCHIVAL_CONFIG",
    "MLFLOW_WORKSPACE_STORE_URI",
    "GUNICORN_CMD_ARGS",
    "WEB_CONCURRENCY",
)
"""Variables `mlflow server` (its options' environment variables, MLflow 3.17) and the web servers
it runs (gunicorn's GUNICORN_CMD_ARGS, uvicorn's UVICORN_*, WEB_CONCURRENCY) read as options. An
inherited `MLFLOW_GUNICORN_OPTS=--bind 0.0.0.0:80` would add a listener on every interface beside
the loopback one: `gatesweep ui` sets the server's options itself and removes these, saying so."""


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


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def server_command(uri: str, port: int) -> list[str]:
    cmd = [sys.executable, "-m", "mlflow", "server", "--host", HOST, "--port", str(port), "--workers", "1"]
    if not has_password(uri):  # else the URI goes in the server's environment: a command line is public (ps)
        cmd[4:4] = ["--backend-store-uri", uri]
    folder = artifacts_folder(uri)
    if folder is not None:  # artifacts uploaded through the UI go beside the database, as the sweeps' do
        cmd += ["--artifacts-destination", str(folder)]
    return cmd


def has_password(uri: str) -> bool:
    try:
        return urlsplit(uri).password is not None
    except ValueError:
        return True


def server_env(environ: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The server's environment: `environ` without the variables that would set its options
    (`SERVER_OPTION_ENV`, UVICORN_*), and the names removed."""
    dropped = sorted(k for k in environ if k in SERVER_OPTION_ENV or k.startswith("UVICORN_"))
    env = {k: v for k, v in environ.items() if k not in dropped}
    env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"
    return env, dropped


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
    """(label, experiment id, parent run id) of the named sweep, or of the newest few sweeps;
    each sweep's experiment marked as model training and its saved view in place."""
    cl = open_client(uri)
    if sweep:
        run, _ = find_parent(cl, sweep)
        parents = [(sweep, run)]
    else:
        parents = list(sweep_parents(cl, experiment_ids(cl)).items())[:10]
    for name, run in parents:
        ensure_view(cl, name, run)
    return [(name, run.info.experiment_id, run.info.run_id) for name, run in parents]


def ensure_view(cl, sweep: str, parent) -> None:
    """Mark the sweep's experiment as model training and give it the sweep's saved view when it
    has none (sweeps launched before gatesweep wrote them); a store that refuses is left as is."""
    exp_id = parent.info.experiment_id
    try:
        exp = cl.get_experiment(exp_id)
        views.mark_training_experiment(cl, exp)
        if views.view_tag(sweep) in (exp.tags or {}):
            return
        pid = parent.info.run_id
        members = search_all(cl, [exp_id], views.member_filter(sweep, pid))
        flt = views.member_filter(sweep, pid) if members else views.children_filter(pid)
        trials = members or search_all(cl, [exp_id], views.children_filter(pid))
        params = parent.data.params
        axes = [p for key in (names.SWEEP_AXES_PARAM, names.SWEEP_SPACE_PARAM) for p in params.get(key, "-").split(",") if p and p != "-"]
        logged = {k for r in trials for k in r.data.metrics}
        views.write_sweep_view(
            cl, exp_id, sweep, search_filter=flt, axes=list(dict.fromkeys(axes)), logged=logged, runs=max(10, len(trials))
        )
    except Exception as err:  # read-only or older store: the URLs still work, with MLflow's defaults
        print(
            f"gatesweep: warning: could not write the saved view of sweep {sweep!r} ({type(err).__name__}); "
            "the runs table opens with MLflow's default columns",
            file=sys.stderr,
        )


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
