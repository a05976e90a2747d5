"""Checks of the services a launch needs, made before anything is written.

A sweep that cannot reach its MLflow store fails only after Ray has started (one traceback per
process), and one whose Ray address is dead hangs in `ray.init` for minutes after the sweep's
state was written. These checks take at most a few seconds each and raise `UserError` (exit
status 2) naming the address and the reason:

- `check_tracking_uri`: an http(s) store answers (MLflow's `/health`, else its REST API, with the
  credentials MLflow would send); a SQLite store's folder takes files and an existing file is a
  SQLite database; a file store is a folder; a database server accepts connections.
- `check_ray_address`: a `HOST:PORT` (or `ray://HOST:PORT`) accepts a TCP connection; `auto` is
  Ray's to resolve.
- `check_local_resources`: a local cluster (no address) has the GPUs one trial asks for.
- `check_hub`: a trial whose data is `hf:NAME` runs on a machine that is online
  (GATESWEEP_ONLINE=1, passed on to the trials).

`preflight` runs them all for `gatesweep run` and `resume`.
"""

from __future__ import annotations

import base64
import os
import socket
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

from orchestrator.spec.files import UserError

TIMEOUT_S = 5.0
SQLITE_MAGIC = b"SQLite format 3\x00"
DB_PORTS = {"postgresql": 5432, "mysql": 3306, "mssql": 1433}


def preflight(uri: str, address: str | None, spec=None, expansion=None, *, source=None, timeout: float = TIMEOUT_S) -> None:
    """Everything a launch needs from outside: the Hub for `hf:` data, the tracking store, the
    Ray cluster, and, for a local cluster, the GPUs of one trial. UserError for the first missing."""
    if expansion is not None:
        check_hub([t.config for t in expansion.trials], source=source)
    check_tracking_uri(uri, timeout=timeout)
    check_ray_address(address, timeout=timeout)
    if spec is not None and not address:
        check_local_resources(spec.resources)


def check_hub(configs, *, source=None) -> None:
    """UserError if a trial reads `hf:` data while gatesweep runs offline."""
    from gatedmodels.typedconfig import ConfigError
    from orchestrator.spec.paths import distinct_problems, hub_problems

    issues = distinct_problems(configs, hub_problems)
    if issues:
        raise UserError(ConfigError(issues, str(source) if source else None).render())


# ---- MLflow --------------------------------------------------------------------------------
def check_tracking_uri(uri: str, *, timeout: float = TIMEOUT_S) -> None:
    """UserError unless the (resolved, absolute) tracking URI can be used from here."""
    from orchestrator.tracking import file_store_path, redact_uri, scheme_of, sqlite_path

    shown = redact_uri(uri)
    scheme = scheme_of(uri)
    if scheme in ("http", "https"):
        _check_http_store(uri, shown, timeout)
    elif scheme == "sqlite":
        _check_sqlite_store(sqlite_path(uri), shown)
    elif scheme == "file":
        path = file_store_path(uri)
        if path.exists() and not path.is_dir():
            raise UserError(f"tracking URI {shown}: {path} is a file; a file store is a folder")
        _check_writable_folder(path if path.is_dir() else path.parent, shown)
    elif scheme in DB_PORTS:
        host, port = _host_port(uri, DB_PORTS[scheme], f"tracking URI: got {shown!r}; expected {scheme}://HOST[:PORT]/...")
        _connect(host, port, timeout, f"cannot reach the database of the tracking URI {shown}")


def _check_http_store(uri: str, shown: str, timeout: float) -> None:
    parts = urlsplit(uri)
    _host_port(uri, 443, f"tracking URI: got {shown!r}; expected {parts.scheme}://HOST[:PORT] with a port in 1..65535")
    root = f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}{parts.path.rstrip('/')}"  # credentials go in a header
    headers = _auth_headers(parts)
    context = _tls_context() if parts.scheme == "https" else None
    status = _get(f"{root}/health", headers, context, timeout, shown)
    if status == 200:
        return
    status = _get(f"{root}/api/2.0/mlflow/experiments/search?max_results=1", headers, context, timeout, shown)
    if status == 200:
        return
    if status in (401, 403):
        raise UserError(
            f"the MLflow tracking server at {shown} refused the credentials (HTTP {status}); set "
            "MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD"
        )
    raise UserError(
        f"{shown} does not answer like an MLflow tracking server (HTTP {status} for /health and "
        "/api/2.0/mlflow/experiments/search); check the tracking URI"
    )


def _get(url: str, headers: dict, context, timeout: float, shown: str) -> int:
    """The HTTP status of a GET (any status: the server answered), or UserError if none came."""
    request = urllib.request.Request(url, headers=headers, method="GET")
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code
    except (urllib.error.URLError, OSError, ValueError) as err:
        reason = getattr(err, "reason", None) or err
        if isinstance(reason, socket.timeout) or "timed out" in str(reason):
            reason = f"no answer within {timeout:g} s"
        elif isinstance(reason, OSError) and reason.strerror:
            reason = reason.strerror
        raise UserError(f"cannot reach the MLflow tracking server at {shown} ({reason})") from None


def _auth_headers(parts) -> dict:
    """The credentials MLflow would send: user:password in the URI, else the environment."""
    token = os.environ.get("MLFLOW_TRACKING_TOKEN")
    user = parts.username or os.environ.get("MLFLOW_TRACKING_USERNAME")
    password = parts.password or os.environ.get("MLFLOW_TRACKING_PASSWORD") or ""
    if user:
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}
    if token:
        return {"Authorization": f"Bearer {token}"}
    return {}


def _tls_context():
    if os.environ.get("MLFLOW_TRACKING_INSECURE_TLS", "").lower() == "true":
        return ssl._create_unverified_context()
    cafile = os.environ.get("MLFLOW_TRACKING_SERVER_CERT_PATH")
    return ssl.create_default_context(cafile=cafile) if cafile else ssl.create_default_context()


def _check_sqlite_store(path: Path, shown: str) -> None:
    if path.exists():
        if not path.is_file():
            raise UserError(f"tracking URI {shown}: {path} is not a file (a SQLite database is one file)")
        try:
            with path.open("rb") as fh:
                head = fh.read(len(SQLITE_MAGIC))
        except OSError as err:
            raise UserError(f"tracking URI {shown}: {path} cannot be read ({err.strerror or err})") from None
        if head and head != SQLITE_MAGIC:
            raise UserError(
                f"tracking URI {shown}: {path} is not a SQLite database (it starts with {head[:8]!r}); "
                "point the URI at a new or an MLflow .db file"
            )
        if not os.access(path, os.R_OK | os.W_OK):
            raise UserError(f"tracking URI {shown}: {path} is not writable")
    _check_writable_folder(path.parent, shown)  # SQLite writes its journal beside the database


def _check_writable_folder(folder: Path, shown: str) -> None:
    if not folder.is_dir():
        raise UserError(f"tracking URI {shown}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UserError(f"tracking URI {shown}: folder {folder} is not writable")


# ---- Ray -----------------------------------------------------------------------------------
def check_ray_address(address: str | None, *, timeout: float = TIMEOUT_S) -> None:
    """UserError unless a cluster answers at `address` (None: a local Ray is started; `auto`:
    Ray finds a running one itself)."""
    if not address or address.strip().lower() in ("auto", "local"):
        return
    text = address.strip()
    bad = f"--address: got {address!r}; expected HOST:PORT (a port in 1..65535), ray://HOST[:PORT] or auto"
    if "://" in text and not text.startswith("ray://"):
        raise UserError(bad)
    host, port = _host_port(text if "://" in text else f"ray://{text}", 10001 if "://" in text else None, bad)
    _connect(host, port, timeout, f"--address: cannot reach the Ray cluster at {address}")


def _host_port(uri: str, default_port: int | None, bad: str) -> tuple[str, int]:
    """(host, port) of a URI; UserError(`bad`) without a host and a port in 1..65535."""
    try:
        parts = urlsplit(uri)
        host, port = parts.hostname, parts.port or default_port
    except ValueError:  # a port that is not a number
        host, port = None, None
    if not host or port is None or not 0 < port < 65536:
        raise UserError(bad)
    return host, port


def _connect(host: str, port: int, timeout: float, what: str) -> None:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except TimeoutError:
        raise UserError(f"{what} (no answer within {timeout:g} s)") from None
    except OSError as err:
        raise UserError(f"{what} ({err.strerror or err})") from None


def check_local_resources(resources) -> None:
    """A local Ray has this machine's GPUs only: a trial asking for more would wait forever."""
    need = resources.gpus_per_worker * resources.workers_per_trial
    if not need:
        return
    have = local_gpus()
    if need > have:
        raise UserError(
            f"resources: a trial needs {need:g} GPUs (gpus_per_worker x workers_per_trial) and this machine has "
            f"{have}; pass --address of a cluster with GPUs, or set resources.gpus_per_worker: 0"
        )


def local_gpus() -> int:
    """GPUs the trials' torch sees here."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0
