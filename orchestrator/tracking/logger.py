"""The buffered metric logger: one MLflow run, explicit run ids, no duplicated points.

Ray Train V2 has no MLflow integration (REFERENCE §5), so the project owns this layer. It uses
`MlflowClient` with explicit run ids (no global "active run"), which is safe in Ray workers.
Params are flattened dotted keys; metrics are buffered and sent with `log_batch`. A logger
reopened on an existing run (a retried or resumed trial) drops metric points whose step was
already logged for that key, so a retry never duplicates a point. Failed sends are kept and
retried with backoff; a warning is printed while the store is unreachable.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from orchestrator.storage.retry import Backoff, retried

from .names import PARENT_TAG
from .store import client, get_or_create_experiment, redact_uri

MAX_PARAM_LEN = 6000


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class StoreCalls:
    """Calls into a tracking store that outlast its outages, with the one retry policy
    (`orchestrator.storage.retry`): a transient error (`transient`: a connection error, a timeout,
    a 5xx answer, a locked SQLite database) is said once as a warning and retried after pauses
    doubling from 1 s to 30 s; any other error is raised at once. Params and tags are retried for
    at most `patience` seconds, then the last error is raised; metrics stay in `_buffer` until a
    flush gets them through (the same schedule, `Backoff`, says when the next flush may try)."""

    def __init__(self, *, quiet: bool = False, patience: float = 600.0):
        self.quiet = quiet
        self.patience = patience
        self._buffer: list = []
        self._down_since: float | None = None
        self._backoff_until = 0.0
        self._pause = Backoff()
        self.warnings: list[str] = []

    def _call(self, fn, *, raise_errors: bool = True, is_transient=None) -> bool:
        """`fn()`; True once it went through. A transient failure (`transient`, or the caller's
        `is_transient`): False at once without `raise_errors` (the caller keeps what it sent),
        else retried until `patience` runs out."""
        if raise_errors:
            retried(fn, "tracking store", budget_s=self.patience, is_transient=is_transient or transient, on_error=self._went_down)
        else:
            try:
                fn()
            except Exception as err:  # store unreachable, locked or erroring: keep the points, say so
                if not transient(err):
                    raise
                self._went_down(err)
                self._backoff_until = time.monotonic() + self._pause.next()
                return False
        if self._down_since is not None:
            self._warn(
                f"tracking store reachable again after {time.monotonic() - self._down_since:.0f} s; {len(self._buffer)} buffered points sent"
            )
            self._down_since = None
        self._pause.reset()
        return True

    def _went_down(self, err: BaseException) -> None:
        if self._down_since is None:
            self._down_since = time.monotonic()
            self._warn(f"tracking store unreachable ({type(err).__name__}); buffering metrics and retrying")

    def _warn(self, text: str) -> None:
        self.warnings.append(text)
        if not self.quiet:
            print(f"[gatesweep] warning: {text}", file=sys.stderr, flush=True)

    def pop_warnings(self) -> list[str]:
        """Warnings since the last call (a sweep forwards them to the driver's console)."""
        out, self.warnings = self.warnings, []
        return out


class RunLogger(StoreCalls):
    """Logs into one MLflow run. Reopening an existing run continues it without duplicate points."""

    def __init__(self, uri: str, run_id: str, *, flush_every: int = 200, flush_seconds: float = 5.0, quiet: bool = False):
        super().__init__(quiet=quiet)
        self.uri, self.run_id = uri, run_id
        self.client = client(uri)
        self.flush_every, self.flush_seconds = flush_every, flush_seconds
        self._last_flush = time.monotonic()
        # reads, so safe to retry: a trial that starts (or is retried) while the store or its
        # database restarts waits for it instead of failing
        found: list = []
        self._call(lambda: found.append(self.client.get_run(run_id)))
        run = found[-1]
        self.existing_params = dict(run.data.params)
        self.existing_tags = dict(run.data.tags)
        """The run's tags when this logger opened it (a reopened run's earlier record)."""
        self.logged_until = {key: self._max_step(key) for key in run.data.metrics}

    def _max_step(self, key: str) -> int:
        found: list = []
        self._call(lambda: found.append(self.client.get_metric_history(self.run_id, key)))
        return max((m.step for m in found[-1]), default=-1)

    # ---- creation --------------------------------------------------------------------
    @classmethod
    def create(
        cls, uri: str, experiment: str, *, run_name: str, tags: dict[str, str] | None = None, parent_run_id: str | None = None, **kw
    ) -> RunLogger:
        cl = client(uri)
        exp_id = get_or_create_experiment(cl, experiment, uri)
        tags = dict(tags or {})
        if parent_run_id:
            tags[PARENT_TAG] = parent_run_id
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
            self._call(lambda chunk=items[i : i + 100]: self.client.log_batch(self.run_id, tags=chunk), is_transient=tag_write_transient)

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
            if not self._call(lambda chunk=chunk: self.client.log_batch(self.run_id, metrics=chunk), raise_errors=False):
                if time.monotonic() >= deadline:
                    return False
                continue
            del self._buffer[: len(chunk)]
        self._last_flush = time.monotonic()
        return True

    # ---- artifacts and end -----------------------------------------------------------
    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        self._call(lambda: self.client.log_artifact(self.run_id, str(path), artifact_path))

    def log_inputs(self, datasets: list) -> None:
        """MLflow dataset inputs (`orchestrator.tracking.inputs`); MLflow keeps one per dataset."""
        if datasets:
            self._call(lambda: self.client.log_inputs(self.run_id, datasets=datasets))

    def log_text(self, text: str, artifact_file: str) -> None:
        self._call(lambda: self.client.log_text(self.run_id, text, artifact_file))

    def finish(self, status: str = "FINISHED", *, wait: float = 120.0) -> None:
        delivered = self.flush(wait=wait)
        if not delivered:
            self._warn(f"{len(self._buffer)} metric points could not be delivered to {redact_uri(self.uri)}")
        self._call(lambda: self.client.set_terminated(self.run_id, status=status))


TRANSIENT_CODES = ("TEMPORARILY_UNAVAILABLE", "DEADLINE_EXCEEDED", "REQUEST_LIMIT_EXCEEDED", "ABORTED")
"""MLflow error codes worth a retry (MLflow's SQL store reports a locked database as TEMPORARILY_UNAVAILABLE)."""


def _causes(err: BaseException, depth: int = 8):
    """`err` and the errors it was raised from or while handling (MLflow's REST client wraps a
    requests error in an MlflowException raised inside its `except`), each once."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [err]
    while todo and len(seen) < depth:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo += [e.__cause__, e.__context__, getattr(e, "orig", None)]  # sqlalchemy keeps the DBAPI error in .orig


def raced(err: BaseException) -> bool:
    """Whether `err` is a tag write that met another process's write of the same new tag: on a
    SQL store MLflow reads a tag, then inserts it when missing, so of two writers of one new tag
    (a stopped trial recording why, and the driver recording the same stop) the second fails on
    the table's unique key. Written again, it finds the row and updates it. Only for tags: a
    param logged twice with two values fails on the same key, and must not be retried."""
    import sqlalchemy.exc

    return any(isinstance(e, sqlalchemy.exc.IntegrityError) for e in _causes(err))


def tag_write_transient(err: BaseException) -> bool:
    """`transient`, or a tag write that `raced` another's."""
    return transient(err) or raced(err)


def set_tags(cl, run_id: str, tags: dict[str, str]) -> None:
    """Set each of `tags` on a run another process may be writing the same tags to
    (`tag_write_transient`: a write that raced is written once more; a store that is down is
    waited for, as the logger does, for up to a minute)."""
    for key, value in tags.items():
        retried(
            lambda key=key, value=value: cl.set_tag(run_id, key, value), "tracking store", budget_s=60, is_transient=tag_write_transient
        )


def transient(err: BaseException) -> bool:
    """Whether `err` is worth retrying, by type and code, never by the words of its message (a
    permanent error quotes run ids and values, which can contain "500" or "timeout"): a
    connection error or a timeout (the standard library's, requests', urllib3's), an MLflow error
    with a transient code or a 5xx answer from a server, a SQLite database that is busy or locked."""
    import sqlite3

    import requests
    import urllib3
    from mlflow.exceptions import MlflowException, RestException

    for e in _causes(err):
        if isinstance(
            e, (ConnectionError, TimeoutError, requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError)
        ):
            return True
        if isinstance(e, (requests.exceptions.RetryError, urllib3.exceptions.MaxRetryError, urllib3.exceptions.ProtocolError)):
            return True
        if isinstance(e, sqlite3.OperationalError) and getattr(e, "sqlite_errorcode", None) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            return True
        if isinstance(e, MlflowException):
            if e.error_code in TRANSIENT_CODES:
                return True
            if isinstance(e, RestException) and e.get_http_status_code() >= 500:  # a server's answer, not a local default
                return True
    return False
