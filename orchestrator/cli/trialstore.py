"""Where a command on a trained trial (`export`, `eval`, `probe --log`) logs what it made, and how
it says that it could not.

The store is `--tracking-uri` when given; else the one the trial's `run.json` names (a trial
records the store its run lives in, credentials redacted: `trial.callbacks.mlflow_logging`);
else MLFLOW_TRACKING_URI or ./mlflow.db, as for `run`. A local store that does not exist is
never created as a side effect (MLflow would create an empty one, with its "Updating database
tables" line, and then not find the run), and a remote one that does not answer is not waited
for. Logging is a step after the command's own work: when it cannot be done, the command says so
in one warning, with the command that does it later, and still succeeds (its files stand).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

from gatedmodels.typedconfig import ConfigError
from orchestrator.core.errors import UserError
from orchestrator.tracking import file_store_path, redact_uri, resolve_tracking_uri, sqlite_path
from orchestrator.tracking.failures import store_failure, unreachable

from .common import tracking_uri

RUN_RECORD = "run.json"
MAX_RECORD_BYTES = 1 << 20


def recorded_store(model_path: Path | None) -> str | None:
    """The tracking URI the trial's run.json (beside its model.pt) names, when it names a usable one."""
    if model_path is None:
        return None
    record = Path(model_path).parent / RUN_RECORD
    try:
        if not record.is_file() or record.stat().st_size > MAX_RECORD_BYTES:
            return None
        uri = json.loads(record.read_text(encoding="utf-8")).get("tracking_uri")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(uri, str) or "***" in uri:  # redacted credentials: the record cannot be used as is
        return None
    return uri


def store_missing(uri: str) -> str | None:
    """Why a local store cannot be logged into without creating it (None when it exists, or is remote)."""
    db, folder = sqlite_path(uri), file_store_path(uri)
    if db is not None and not db.is_file():
        return f"no store at {db}"
    if folder is not None and not folder.is_dir():
        return f"no store at {folder}"
    return None


def logging_store(explicit: str | None, model_path: Path | None) -> tuple[str | None, str]:
    """(the store to log into, "") or (None, why there is none usable): `explicit` (an already
    resolved --tracking-uri), else the trial's recorded store, else MLFLOW_TRACKING_URI or
    ./mlflow.db. A missing local store or a silent server is only a reason not to log."""
    uri = explicit or recorded_store(model_path) or ""
    try:
        uri = resolve_tracking_uri(uri or None)
    except ConfigError as err:
        return None, str(err)
    problem = store_missing(uri) or unreachable(uri)
    if problem:
        return None, problem if problem.startswith("no store") else f"{redact_uri(uri)}: {problem}"
    return uri, ""


def explicit_store(flag: str | None) -> str | None:
    """--tracking-uri resolved before the command's work (a bad one is the user's mistake: exit 2,
    nothing written); None without the flag."""
    return tracking_uri(flag) if flag else None


def log_step(what: str, do: Callable[[], str], later: str) -> bool:
    """Run the logging step `do` (it returns what it logged, for the line printed); on any failure,
    one warning naming `what` was not logged, why, and the command `later` that does it. True when logged."""
    try:
        print(do())
        return True
    except UserError:
        raise
    except Exception as err:  # MLflow's and its stores' errors: the command's own files stand
        reason = store_failure(err) or f"{type(err).__name__}: {' '.join(str(err).split())[:200]}"
        skip(what, reason, later)
        return False


def skip(what: str, reason: str, later: str) -> None:
    """The one warning of a logging step that is not done."""
    print(f"gatesweep: warning: {what} not logged ({reason}); to log it later: {later}", file=sys.stderr, flush=True)
