"""The MLflow UI's server for `gatesweep ui`: `mlflow server` bound to 127.0.0.1 with one
worker and background job execution off (it answers in seconds), its options set by gatesweep
alone (none inherited from the environment: `SERVER_OPTION_ENV`), a backend URI with a password
passed in its environment rather than on its public command line, and stopped by process group.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from .store import artifacts_folder

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
