"""The MLflow layer: URI resolution, experiments, runs, and a buffered metric logger.

Ray Train V2 has no MLflow integration (REFERENCE §5), so the project owns this layer. It uses
`MlflowClient` with explicit run ids (no global "active run"), which is safe in Ray workers.

- `resolve_tracking_uri`: `--tracking-uri`, else MLFLOW_TRACKING_URI, else
  sqlite:///<cwd>/mlflow.db, always made absolute (Ray runs trials in other directories).
- `RunLogger`: params as flattened dotted keys, metrics buffered and sent with `log_batch`;
  a logger reopened on an existing run (a retried or resumed trial) drops metric points whose step
  was already logged for that key, so a retry never duplicates a point. Failed sends are kept
  and retried with backoff; a warning is printed while the store is unreachable.
- Credentials inside URIs are never logged: `redact_uri`.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from gatedmodels.configbase import ConfigError, Issue

# Fail fast on HTTP stores; RunLogger does its own buffering and retrying.
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")

SCHEMES = ("sqlite", "file", "http", "https", "postgresql", "mysql", "mssql", "databricks")
MAX_PARAM_LEN = 6000


def resolve_tracking_uri(explicit: str | None = None, *, cwd: Path | None = None) -> str:
    """An absolute tracking URI; raise ConfigError for one that MLflow cannot use."""
    cwd = cwd or Path.cwd()
    uri = explicit or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{cwd / 'mlflow.db'}"
    where = "--tracking-uri" if explicit else ("MLFLOW_TRACKING_URI" if os.environ.get("MLFLOW_TRACKING_URI") else "tracking uri")
    if "://" not in uri:
        path = (cwd / Path(uri).expanduser()).resolve()
        uri = f"sqlite:///{path}" if path.suffix == ".db" else path.as_uri()
    scheme = uri.split("://", 1)[0].split("+", 1)[0].lower()
    if scheme not in SCHEMES:
        raise ConfigError([Issue(where, f"got {redact_uri(uri)!r}; allowed schemes: {', '.join(SCHEMES)}")])
    if scheme == "sqlite":
        path = uri[len("sqlite:///"):] if uri.startswith("sqlite:///") else ""
        if not path or path == ":memory:":
            raise ConfigError([Issue(where, f"got {uri!r}; expected sqlite:///path/to/mlflow.db")])
        full = Path(path) if Path(path).is_absolute() else (cwd / path)
        if not full.parent.exists():
            raise ConfigError([Issue(where, f"got {uri!r}: folder {full.parent} does not exist")])
        uri = f"sqlite:///{full.resolve()}"
    elif scheme == "file":
        path = Path(urlsplit(uri).path)
        uri = (path if path.is_absolute() else (cwd / path)).resolve().as_uri()
    elif scheme in ("http", "https"):
        parts = urlsplit(uri)
        if not parts.hostname:
            raise ConfigError([Issue(where, f"got {redact_uri(uri)!r}; expected http(s)://HOST:PORT")])
    return uri


def redact_uri(uri: str) -> str:
    """Drop user:password@ and secret-looking query values from a URI."""
    try:
        parts = urlsplit(uri)
    except ValueError:
        return "<unparseable uri>"
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    query = re.sub(r"(?i)((?:token|password|secret|key|sig)[^=&]*)=[^&]*", r"\1=***", parts.query)
    if netloc == parts.netloc and query == parts.query:
        return uri  # nothing secret; keep the exact text (urlunsplit would drop sqlite:////'s slashes)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def default_artifact_root(uri: str) -> str | None:
    """For local stores, artifacts go beside the database (absolute: Ray changes directories)."""
    if uri.startswith("sqlite:///"):
        return (Path(uri[len("sqlite:///"):]).parent / "mlartifacts").as_uri()
    return None


_READY: set[str] = set()


def client(uri: str):
    """An MlflowClient; a new SQLite store is created under a file lock, because concurrent
    first use by several processes races in MLflow's schema migration."""
    from mlflow.tracking import MlflowClient

    if not uri.startswith("sqlite:///") or uri in _READY:
        return MlflowClient(tracking_uri=uri)
    import fcntl

    db = Path(uri[len("sqlite:///"):])
    with open(db.with_name(db.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cl = MlflowClient(tracking_uri=uri)
        cl.search_experiments(max_results=1)
    _READY.add(uri)
    return cl


def get_or_create_experiment(cl, name: str, uri: str) -> str:
    exp = cl.get_experiment_by_name(name)
    if exp is not None:
        if exp.lifecycle_stage == "deleted":
            cl.restore_experiment(exp.experiment_id)
        return exp.experiment_id
    root = default_artifact_root(uri)
    location = f"{root}/{re.sub(r'[^A-Za-z0-9_.-]+', '_', name)}" if root else None
    try:
        return cl.create_experiment(name, artifact_location=location)
    except Exception:
        exp = cl.get_experiment_by_name(name)  # created concurrently by another process
        if exp is None:
            raise
        return exp.experiment_id


def search_all(cl, experiment_ids: list[str], filter_string: str = "", page: int = 5000) -> list:
    """Every run matching the filter, all pages (search_runs returns one page at a time)."""
    out, token = [], None
    while True:
        batch = cl.search_runs(experiment_ids, filter_string=filter_string, max_results=page, page_token=token)
        out.extend(batch)
        token = batch.token
        if not token:
            return out


def package_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("gatesweep", "torch", "deepspeed", "ray", "mlflow", "optuna", "datasets"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


def git_state() -> dict[str, str]:
    """Commit and dirty flag of the gatesweep checkout, when it is one."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        if commit.returncode != 0:
            return {}
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, timeout=5)
        return {"git.commit": commit.stdout.strip(), "git.dirty": str(bool(dirty.stdout.strip())).lower()}
    except (OSError, subprocess.SubprocessError):
        return {}


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class RunLogger:
    """Logs into one MLflow run. Reopening an existing run continues it without duplicate points."""

    def __init__(self, uri: str, run_id: str, *, flush_every: int = 200, flush_seconds: float = 5.0, quiet: bool = False):
        self.uri, self.run_id = uri, run_id
        self.client = client(uri)
        self.flush_every, self.flush_seconds, self.quiet = flush_every, flush_seconds, quiet
        self._buffer: list = []
        self._last_flush = time.monotonic()
        self._down_since: float | None = None
        self._backoff_until = 0.0
        self._backoff = 1.0
        self.warnings: list[str] = []
        run = self.client.get_run(run_id)
        self.existing_params = dict(run.data.params)
        self.logged_until = {key: self._max_step(key) for key in run.data.metrics}

    def _max_step(self, key: str) -> int:
        history = self.client.get_metric_history(self.run_id, key)
        return max((m.step for m in history), default=-1)

    # ---- creation --------------------------------------------------------------------
    @classmethod
    def create(cls, uri: str, experiment: str, *, run_name: str, tags: dict[str, str] | None = None,
               parent_run_id: str | None = None, **kw) -> "RunLogger":
        cl = client(uri)
        exp_id = get_or_create_experiment(cl, experiment, uri)
        tags = dict(tags or {})
        if parent_run_id:
            tags["mlflow.parentRunId"] = parent_run_id
        run = cl.create_run(exp_id, run_name=run_name, tags=tags)
        return cls(uri, run.info.run_id, **kw)

    # ---- params and tags -------------------------------------------------------------
    def log_params(self, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        items = []
        for key, value in params.items():
            text = json.dumps(value) if isinstance(value, (list, dict)) else str(value)
            text = text[:MAX_PARAM_LEN]
            if self.existing_params.get(key) == text:
                continue
            items.append(Param(key, text))
            self.existing_params[key] = text
        for i in range(0, len(items), 100):
            self._call(lambda chunk=items[i : i + 100]: self.client.log_batch(self.run_id, params=chunk))

    def set_tags(self, tags: dict[str, Any]) -> None:
        from mlflow.entities import RunTag

        items = [RunTag(k, str(v)[:5000]) for k, v in tags.items()]
        for i in range(0, len(items), 100):
            self._call(lambda chunk=items[i : i + 100]: self.client.log_batch(self.run_id, tags=chunk))

    # ---- metrics ---------------------------------------------------------------------
    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        for key, value in metrics.items():
            if not _is_number(value) or step <= self.logged_until.get(key, -1):
                continue
            value = float(value)
            if math.isnan(value) or math.isinf(value):
                value = float("nan") if math.isnan(value) else math.copysign(1e308, value)
            self._buffer.append(Metric(key, value, now, step))
            self.logged_until[key] = step
        if len(self._buffer) >= self.flush_every or time.monotonic() - self._last_flush > self.flush_seconds:
            self.flush()

    def flush(self, *, wait: float = 0.0) -> bool:
        """Send buffered metrics. On failure keep them and back off; with `wait`, retry that long."""
        deadline = time.monotonic() + wait
        while self._buffer:
            if time.monotonic() < self._backoff_until and time.monotonic() >= deadline:
                return False
            if time.monotonic() < self._backoff_until:
                time.sleep(min(self._backoff_until, deadline) - time.monotonic())
            chunk = self._buffer[:1000]
            if not self._call(lambda: self.client.log_batch(self.run_id, metrics=chunk), raise_errors=False):
                if time.monotonic() >= deadline:
                    return False
                continue
            del self._buffer[: len(chunk)]
        self._last_flush = time.monotonic()
        return True

    def _call(self, fn, *, raise_errors: bool = True) -> bool:
        try:
            fn()
        except Exception as err:  # store unreachable, locked or erroring: keep going, say so
            if not _transient(err):
                raise
            now = time.monotonic()
            if self._down_since is None:
                self._down_since = now
                self._warn(f"tracking store unreachable ({type(err).__name__}); buffering metrics and retrying")
            self._backoff_until = now + self._backoff
            self._backoff = min(self._backoff * 2, 30.0)
            if raise_errors:
                # params/tags are few: retry them until the store answers (bounded by the caller's patience)
                time.sleep(max(0.0, self._backoff_until - now))
                return self._call(fn, raise_errors=raise_errors)
            return False
        if self._down_since is not None:
            self._warn(f"tracking store reachable again after {time.monotonic() - self._down_since:.0f} s; {len(self._buffer)} buffered points sent")
            self._down_since = None
        self._backoff = 1.0
        return True

    def _warn(self, text: str) -> None:
        self.warnings.append(text)
        if not self.quiet:
            print(f"[gatesweep] warning: {text}", file=sys.stderr, flush=True)

    def pop_warnings(self) -> list[str]:
        """Warnings since the last call (a sweep forwards them to the driver's console)."""
        out, self.warnings = self.warnings, []
        return out

    # ---- artifacts and end -----------------------------------------------------------
    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        self._call(lambda: self.client.log_artifact(self.run_id, str(path), artifact_path))

    def log_text(self, text: str, artifact_file: str) -> None:
        self._call(lambda: self.client.log_text(self.run_id, text, artifact_file))

    def finish(self, status: str = "FINISHED", *, wait: float = 120.0) -> None:
        delivered = self.flush(wait=wait)
        if not delivered:
            self._warn(f"{len(self._buffer)} metric points could not be delivered to {redact_uri(self.uri)}")
        self._call(lambda: self.client.set_terminated(self.run_id, status=status))


def _transient(err: Exception) -> bool:
    """Errors worth retrying: connection problems, server 5xx, a locked SQLite database."""
    text = f"{type(err).__name__} {err}".lower()
    needles = ("connection", "timeout", "timed out", "max retries", "temporarily", "database is locked",
               "503", "502", "504", "500", "refused", "reset by peer", "unavailable")
    return any(n in text for n in needles)
