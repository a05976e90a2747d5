"""What a failure of the tracking store looks like, for every reader that must say it in one line:
the CLI's error contract (`orchestrator.cli.main`) and the notebook API (`dashboards.results`).

`store_failure(err)` gives one line for an error raised by MLflow, its databases or its HTTP
client (the error itself or one it was raised from), None for anything else (a bug, whose
traceback is what a report of it needs). `unreachable(uri)` says in `timeout` seconds whether
the server behind a remote URI accepts a connection at all, before MLflow's own retries
(about half a minute against a dead server) start.
"""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

from .store import redact_uri, scheme_of

#: (top-level module, class name, what failed) of the exceptions a tracking store raises: MLflow's
#: own, its databases' and its HTTP client's. Matched on the class hierarchy, so nothing is
#: imported here.
STORE_ERRORS = (
    ("mlflow", "MlflowException", "the tracking store failed"),
    ("sqlalchemy", "SQLAlchemyError", "the tracking store failed"),
    ("sqlite3", "Error", "the tracking store failed"),
    ("requests", "RequestException", "a request to a server failed"),
    ("urllib3", "HTTPError", "a request to a server failed"),
)
DEFAULT_PORTS = {"http": 80, "https": 443, "postgresql": 5432, "mysql": 3306, "mssql": 1433}
"""The schemes whose store is a server, and the port their URI implies."""


def store_failure(err: BaseException) -> str | None:
    """One line for an error of the tracking store (the error or one it was raised from), else None."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        for cls in type(current).__mro__:
            for module, name, what in STORE_ERRORS:
                if cls.__module__.split(".")[0] == module and cls.__name__ == name:
                    text = " ".join(str(current).split())
                    return f"{what}: {type(current).__name__}: {text[:400] or 'no message'}"
        current = current.__cause__ or current.__context__
    return None


def unreachable(uri: str, timeout: float = 3.0) -> str | None:
    """Why the server behind a remote tracking URI cannot be reached (one line, credentials
    redacted), or None: it accepts a TCP connection, or the URI is not a server's (a SQLite file,
    a folder). Only a connection is tried; whether the server answers as MLflow is MLflow's."""
    scheme = scheme_of(uri)
    base = scheme.split("+", 1)[0]
    if base not in DEFAULT_PORTS:
        return None
    shown = redact_uri(uri)
    try:
        parts = urlsplit(uri)
        host, port = parts.hostname, parts.port or DEFAULT_PORTS[base]
    except ValueError as err:
        return f"tracking URI {shown}: {err}"
    if not host:
        return f"tracking URI {shown}: no host"
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as err:
        return f"cannot reach the tracking server of {shown} ({host}:{port}: {err.strerror or type(err).__name__})"
