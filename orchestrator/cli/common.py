"""Shared CLI helpers: writable folders, config errors as user errors, small tables. Safe YAML
loading and `UserError` live in `orchestrator.spec.files` (the launcher and sweep loader use them too)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from gatedmodels.typedconfig import ConfigError, Issue
from orchestrator.core.errors import UserError
from orchestrator.core.printable import terminal
from orchestrator.launch.preflight import DB_PORTS, check_tracking_uri
from orchestrator.spec.files import load_yaml
from orchestrator.tracking import resolve_tracking_uri, scheme_of


def writable_dir(path: str | Path, flag: str) -> Path:
    """`path` as an absolute folder that exists and takes files, or UserError naming the flag."""
    p = Path(path).expanduser().resolve()
    try:
        p.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=p, prefix=".write-test-"):
            pass
    except OSError as err:
        raise UserError(f"{flag}: {p} is not a writable folder ({err.strerror or err})") from None
    return p


def tracking_uri(explicit: str | None, configured: str | None = None) -> str:
    """The absolute tracking URI: --tracking-uri, else the file's tracking.uri, else
    MLFLOW_TRACKING_URI, else sqlite:///<cwd>/mlflow.db; UserError for one MLflow cannot use,
    and for a remote store that does not answer (or refuses the credentials), in a few seconds
    rather than after MLflow's retries. A command calls it when it is going to use the store."""
    try:
        uri = resolve_tracking_uri(explicit or configured)
    except ConfigError as err:
        raise UserError(str(err)) from None
    if scheme_of(uri) in ("http", "https", *DB_PORTS):  # a store behind a server: does it answer?
        check_tracking_uri(uri)
    return uri


def config_error(err: ConfigError, source: str | Path) -> UserError:
    return UserError(err.with_source(str(source)).render())


def print_table(rows: list[dict], columns: list[str] | None = None, file=None) -> None:
    file = file or sys.stdout
    if not rows:
        return
    columns = columns or list(rows[0])
    cells = [[_fmt(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)), file=file)
    print("  ".join("-" * w for w in widths), file=file)
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)), file=file)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value != value:
            return "nan"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.2f}"
        return f"{value:.3f}"
    return terminal(value)  # a value from a shared sweep file or the store: no terminal control characters


__all__ = ["ConfigError", "Issue", "UserError", "config_error", "load_yaml", "print_table"]
