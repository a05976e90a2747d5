"""Checks of the services a launch needs, made before anything is written.

A sweep that cannot reach its MLflow store fails only after Ray has started (one traceback per
process), and one whose Ray address is dead hangs in `ray.init` for minutes after the sweep's
state was written. These checks take at most a few seconds each and raise `UserError` (exit
status 2) naming the address and the reason:

- `check_tracking_uri`: an http(s) or Databricks store answers one cheap `MlflowClient` call
  (searching one experiment) with the credentials, auth plugins and TLS settings MLflow itself
  uses, within the timeout, and a server proxying artifacts can list its destination (a missing
  bucket is refused here, not after a trial's first upload); a SQLite store's folder takes files and an existing file is a SQLite
  database; a file store is a folder; a database server accepts connections, and a login to the
  URI's database with its credentials (a wrong password, a missing database, a driver that is not
  installed: one line).
- `check_ray_address`: a `HOST:PORT` (or `ray://HOST:PORT`) accepts a TCP connection; `auto` is
  Ray's to resolve.
- `check_local_resources`: a local cluster (no address) has the GPUs one trial asks for.
- `check_hub`: a trial whose data is `hf:NAME` runs on a machine that is online
  (GATESWEEP_ONLINE=1, passed on to the trials).

`preflight` runs them all for `gatesweep run` and `resume`.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import re
import socket
import ssl
import threading
from pathlib import Path
from urllib.parse import urlsplit

from gatedmodels.typedconfig import ConfigError
from orchestrator.core.errors import UserError
from orchestrator.spec.paths import distinct_problems, hub_problems
from orchestrator.tracking import database_driver, file_store_path, redact_uri, scheme_of, sqlite_path
from orchestrator.tracking.store import DB_DRIVERS

TIMEOUT_S = 5.0
SQLITE_MAGIC = b"SQLite format 3\x00"
DB_PORTS = {"postgresql": 5432, "mysql": 3306, "mssql": 1433}
SEARCH_ENDPOINT = "/api/2.0/mlflow/experiments/search"


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
    issues = distinct_problems(configs, hub_problems)
    if issues:
        raise UserError(ConfigError(issues, str(source) if source else None).render())


# ---- MLflow --------------------------------------------------------------------------------
def check_tracking_uri(uri: str, *, timeout: float = TIMEOUT_S) -> None:
    """UserError unless the (resolved, absolute) tracking URI can be used from here."""
    shown = redact_uri(uri)
    scheme = scheme_of(uri)
    if scheme in ("http", "https", "databricks"):
        _check_server(uri, shown, scheme, timeout)
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
        _check_database_login(uri, shown, timeout)


def _check_database_login(uri: str, shown: str, timeout: float) -> None:
    """One SQLAlchemy connection to the URI's database (no query, no migration), in `timeout` s:
    refused credentials or a missing database are one line naming the URI (redacted) and the
    server's reason, never the password."""
    if scheme_of(uri) not in DB_DRIVERS:
        return
    try:
        uri = database_driver(uri)
    except ConfigError as err:
        raise UserError(str(err)) from None
    import sqlalchemy

    outcome: list[BaseException | None] = []

    def login() -> None:
        try:
            engine = sqlalchemy.create_engine(
                uri, poolclass=sqlalchemy.pool.NullPool, connect_args={"connect_timeout": max(1, math.ceil(timeout))}
            )
            try:
                with engine.connect():
                    pass
            finally:
                engine.dispose()
            outcome.append(None)
        except BaseException as err:  # reported below
            outcome.append(err)

    worker = threading.Thread(target=login, name="preflight-database", daemon=True)
    worker.start()
    worker.join(timeout)
    if not outcome:
        raise UserError(f"the database of the tracking URI {shown} does not answer (no login within {timeout:g} s)")
    err = outcome[0]
    if err is None:
        return
    cause = getattr(err, "orig", None) or err
    lines = [ln.strip() for ln in str(cause).strip().splitlines() if ln.strip()]
    reason = next((ln for ln in lines if "FATAL" in ln), lines[0] if lines else type(cause).__name__)
    reason = re.sub(r"^.*?FATAL:\s*", "", reason)
    password = urlsplit(uri).password
    if password:
        reason = reason.replace(password, "***")
    raise UserError(f"the database of the tracking URI {shown} refused the login ({reason[:300]})")


def _check_server(uri: str, shown: str, scheme: str, timeout: float) -> None:
    """One `MlflowClient(uri).search_experiments(max_results=1)`: the client sends whatever it would
    send in a trial (user:password in the URI, MLFLOW_TRACKING_TOKEN / USERNAME / PASSWORD,
    ~/.mlflow/credentials, an MLFLOW_TRACKING_AUTH plugin, a Databricks profile, client
    certificates and MLFLOW_TRACKING_SERVER_CERT_PATH / INSECURE_TLS), so an answer proves both
    reachability and authorisation. MLflow's retries are off and each request waits at most
    `timeout` s (rounded up: MLflow takes whole seconds); the call as a whole, name resolution and
    a Databricks SDK included, is given up after `timeout` s."""
    if scheme in ("http", "https"):
        _host_port(uri, 443, f"tracking URI: got {shown!r}; expected {scheme}://HOST[:PORT] with a port in 1..65535")
    # imported here, not in the worker, so the deadline times the request and not the imports
    for module in ("mlflow.store.tracking.rest_store", "mlflow.tracking.request_header.registry"):
        importlib.import_module(module)
    from mlflow import MlflowClient

    outcome: list[BaseException | None] = []

    def probe() -> None:
        try:
            MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
            outcome.append(None)
        except BaseException as err:  # reported by the caller
            outcome.append(err)

    with _environ(MLFLOW_HTTP_REQUEST_MAX_RETRIES="0", MLFLOW_HTTP_REQUEST_TIMEOUT=str(max(1, math.ceil(timeout)))):
        worker = threading.Thread(target=probe, name="preflight-mlflow", daemon=True)
        worker.start()
        worker.join(timeout)
    if not outcome:  # still waiting: the thread is a daemon and ends with its own timeout
        raise UserError(f"cannot reach the MLflow tracking server at {shown} (no answer within {timeout:g} s)")
    if outcome[0] is not None:
        raise UserError(_refusal(outcome[0], uri, shown, scheme, timeout))
    if scheme in ("http", "https"):
        _check_artifact_proxy(uri, shown, timeout)


ARTIFACTS_ENDPOINT = "/api/2.0/mlflow-artifacts/artifacts"


def _check_artifact_proxy(uri: str, shown: str, timeout: float) -> None:
    """A server that proxies artifacts (`--artifacts-destination`) lists its destination's root
    (a read, with the client's credentials): a missing bucket, a wrong endpoint or refused
    object-store credentials on the server's side are an MLflow error answer, refused here in
    one line; otherwise every trial's first upload would fail only after minutes of retries (the
    server answers 500 to an upload into a missing bucket). A server that does not proxy
    artifacts (no such endpoint) or does not answer this is left alone."""
    import json

    from mlflow.utils.credentials import get_default_host_creds
    from mlflow.utils.rest_utils import http_request

    outcome: list = []

    def probe() -> None:
        try:
            outcome.append(http_request(get_default_host_creds(uri), ARTIFACTS_ENDPOINT, "GET", params={"path": ""}))
        except BaseException as err:  # the check is best effort: reachability was proven above
            outcome.append(err)

    with _environ(MLFLOW_HTTP_REQUEST_MAX_RETRIES="0", MLFLOW_HTTP_REQUEST_TIMEOUT=str(max(1, math.ceil(timeout)))):
        worker = threading.Thread(target=probe, name="preflight-artifacts", daemon=True)
        worker.start()
        worker.join(timeout)
    if not outcome or isinstance(outcome[0], BaseException) or outcome[0].status_code in (200, 401, 403):
        return
    try:
        body = json.loads(outcome[0].text)
    except ValueError:
        return  # not MLflow's answer (a route the server does not have)
    if not isinstance(body, dict) or "error_code" not in body:
        return
    message = str(body.get("message", ""))
    first = re.sub(r"//[^/@\s]*@", "//***@", message.strip().splitlines()[0] if message.strip() else body["error_code"])
    raise UserError(
        f"the MLflow tracking server at {shown} cannot use its artifact store (HTTP {outcome[0].status_code}: {first[:300]}); "
        "check the server's --artifacts-destination and its credentials for that store"
    )


@contextlib.contextmanager
def _environ(**values: str):
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _causes(err: BaseException) -> list[BaseException]:
    """`err` and what lies under it: `__cause__` / `__context__`, and the wrapped errors of requests
    and urllib3 (`args[0]`, `.reason`), which MLflow re-raises as text."""
    seen: list[BaseException] = []
    todo = [err]
    while todo:
        e = todo.pop()
        if any(e is s for s in seen):
            continue
        seen.append(e)
        todo += [x for x in (e.__cause__, e.__context__, getattr(e, "reason", None), *e.args[:1]) if isinstance(x, BaseException)]
    return seen


def _refusal(err: BaseException, uri: str, shown: str, scheme: str, timeout: float) -> str:
    """One line for a failed check: unreachable (the socket's reason), refused credentials, not an
    MLflow tracking server (the HTTP status), else MLflow's own first sentence, the URI redacted."""
    import requests
    from mlflow.exceptions import MlflowException, RestException

    causes = _causes(err)
    reason: str | None = None
    if any(isinstance(e, (requests.exceptions.Timeout, TimeoutError)) for e in causes):
        reason = f"no answer within {timeout:g} s"
    elif tls := next((e for e in causes if isinstance(e, ssl.SSLError)), None):
        detail = getattr(tls, "verify_message", None) or tls.reason or tls
        reason = f"TLS: {detail}; set MLFLOW_TRACKING_SERVER_CERT_PATH to the server's CA bundle"
    elif sock := next((e for e in causes if isinstance(e, OSError) and e.strerror), None):
        reason = sock.strerror
    elif any(isinstance(e, requests.exceptions.ConnectionError) and not isinstance(e, requests.exceptions.RetryError) for e in causes):
        reason = "the connection failed"
    if reason is not None:
        return f"cannot reach the MLflow tracking server at {shown} ({reason})"
    text = str(err).replace(uri, shown)
    status = next((int(m[1]) for e in causes if (m := re.search(r"too many (\d{3}) error responses", str(e)))), None)
    if status is None and (m := re.search(r"failed with error code (\d{3})", text)):
        status = int(m[1])
    if status is None and isinstance(err, RestException):
        status = err.get_http_status_code()
    if status in (401, 403):
        how = (
            "check the Databricks profile of the URI (databricks auth login)"
            if scheme == "databricks"
            else "set MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_AUTH for an auth plugin)"
        )
        return f"the MLflow tracking server at {shown} refused the credentials (HTTP {status}); {how}"
    if status is not None:
        return f"{shown} does not answer like an MLflow tracking server (HTTP {status} for {SEARCH_ENDPOINT}); check the tracking URI"
    first = text.strip().splitlines()[0] if text.strip() else ""
    first = re.sub(r"//[^/@\s]*@", "//***@", first.split(". ", 1)[0].rstrip("."))  # MLflow's first sentence
    what = first if isinstance(err, MlflowException) and first else f"{type(err).__name__}: {first}".rstrip(": ")
    return f"the MLflow tracking URI {shown} cannot be used ({what[:300]}); check the URI and MLflow's settings for it"


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
