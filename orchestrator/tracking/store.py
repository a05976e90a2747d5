"""The store: tracking URIs (resolution, parsing, redaction), the client, experiments and
paginated run queries.

- `resolve_tracking_uri`: `--tracking-uri`, else MLFLOW_TRACKING_URI, else
  sqlite:///<cwd>/mlflow.db, always made absolute (Ray runs trials in other directories).
- `sqlite_path` / `file_store_path`: the local file or folder behind a URI (None for others);
  nobody else takes a `sqlite:///` or `file:` URI apart.
- `database_driver`: a `postgresql://` / `mysql://` URI names an installed driver (the one
  installed when none is named), or a ConfigError names the package to install.
- `redact_uri`: credentials inside URIs are never logged.
- `search_all` / `all_experiments`: every page of a search (MLflow returns one at a time).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from gatedmodels.typedconfig import ConfigError, Issue

from ..storage import FileLock
from .views import EXPERIMENT_KIND_TAG, TRAINING_KIND, mark_training_experiment

# Fail fast on HTTP stores; RunLogger does its own buffering and retrying.
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")

SCHEMES = ("sqlite", "file", "http", "https", "postgresql", "mysql", "mssql", "databricks")
SQLITE_PREFIX = "sqlite:///"
PAGE = 5000
"""Runs per search_runs page (MLflow's limit is 50,000)."""
ARTIFACTS_FOLDER = "mlartifacts"
"""Local stores keep their artifacts in this folder beside the database."""


# ---- URIs -------------------------------------------------------------------------------------
def sqlite_path(uri: str) -> Path | None:
    """The database file of a `sqlite:///PATH` URI (relative as written, when it is), else None."""
    return Path(uri[len(SQLITE_PREFIX) :]) if uri.startswith(SQLITE_PREFIX) else None


def sqlite_uri(path: str | Path) -> str:
    """The URI of a SQLite database file: `sqlite:////abs/path/mlflow.db` for an absolute path."""
    return f"{SQLITE_PREFIX}{path}"


def file_store_path(uri: str) -> Path | None:
    """The folder of a `file:` URI (percent-escapes decoded), else None."""
    return Path(unquote(urlsplit(uri).path)) if uri.startswith("file:") else None


def scheme_of(uri: str) -> str:
    """`sqlite`, `http`, `postgresql`, ...: the scheme without a driver (`mysql+pymysql` -> `mysql`)."""
    return uri.split("://", 1)[0].split("+", 1)[0].lower()


def resolve_tracking_uri(explicit: str | None = None, *, cwd: Path | None = None, name: str = "--tracking-uri") -> str:
    """An absolute tracking URI; raise ConfigError for one that MLflow cannot use (naming `name`,
    the flag or argument `explicit` came from, when it is the one at fault)."""
    cwd = cwd or Path.cwd()
    uri = explicit or os.environ.get("MLFLOW_TRACKING_URI") or sqlite_uri(cwd / "mlflow.db")
    where = name if explicit else ("MLFLOW_TRACKING_URI" if os.environ.get("MLFLOW_TRACKING_URI") else "tracking uri")
    if "://" not in uri:
        local = (cwd / Path(uri).expanduser()).resolve()
        uri = sqlite_uri(local) if local.suffix == ".db" else local.as_uri()
    scheme = scheme_of(uri)
    if scheme not in SCHEMES:
        raise ConfigError([Issue(where, f"got {redact_uri(uri)!r}; allowed schemes: {', '.join(SCHEMES)}")])
    if scheme == "sqlite":
        db = sqlite_path(uri)
        if db is None or str(db) in ("", ".", ":memory:"):
            raise ConfigError([Issue(where, f"got {uri!r}; expected {SQLITE_PREFIX}path/to/mlflow.db")])
        full = db if db.is_absolute() else (cwd / db)
        if not full.parent.exists():
            raise ConfigError([Issue(where, f"got {uri!r}: folder {full.parent} does not exist")])
        uri = sqlite_uri(full.resolve())
    elif scheme == "file":
        folder = file_store_path(uri)
        assert folder is not None
        uri = (folder if folder.is_absolute() else (cwd / folder)).resolve().as_uri()
    elif scheme in ("http", "https"):
        parts = urlsplit(uri)
        if not parts.hostname:
            raise ConfigError([Issue(where, f"got {redact_uri(uri)!r}; expected http(s)://HOST:PORT")])
    elif scheme in DB_DRIVERS:
        uri = database_driver(uri, where)
    return uri


DB_DRIVERS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "postgresql": (("psycopg2", "psycopg2", "psycopg2-binary"), ("psycopg", "psycopg", "psycopg[binary]")),
    "mysql": (("mysqldb", "MySQLdb", "mysqlclient"), ("pymysql", "pymysql", "pymysql")),
}
"""Per database: (SQLAlchemy driver name, module, pip package), SQLAlchemy's default driver first."""


def _importable(module: str) -> bool:
    import importlib

    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def database_driver(uri: str, where: str = "tracking uri") -> str:
    """`uri` with a driver that is installed: `postgresql://` is SQLAlchemy's psycopg2; when only
    psycopg (3) is installed it becomes `postgresql+psycopg://`. ConfigError naming the package
    to install when the URI's driver (or every driver of its database) is missing."""
    scheme, rest = uri.split("://", 1)
    base, _, named = scheme.partition("+")
    drivers = DB_DRIVERS[base.lower()]
    packages = " or ".join(f"pip install '{pkg}'" for _, _, pkg in reversed(drivers))
    if named:
        known = {d: (mod, pkg) for d, mod, pkg in drivers}
        if named.lower() in known and not _importable(known[named.lower()][0]):
            mod, pkg = known[named.lower()]
            raise ConfigError([Issue(where, f"got {redact_uri(uri)!r}: its database driver {mod} is not installed; pip install '{pkg}'")])
        return uri
    for driver, module, _ in drivers:
        if _importable(module):
            return uri if driver == drivers[0][0] else f"{base}+{driver}://{rest}"
    raise ConfigError([Issue(where, f"got {redact_uri(uri)!r}: no {base} database driver is installed; {packages}")])


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


def artifacts_folder(uri: str) -> Path | None:
    """For a local SQLite store, the artifact folder beside the database; else None."""
    path = sqlite_path(uri)
    return path.parent / ARTIFACTS_FOLDER if path is not None else None


def default_artifact_root(uri: str) -> str | None:
    """For local stores, artifacts go beside the database (absolute: Ray changes directories)."""
    folder = artifacts_folder(uri)
    return folder.as_uri() if folder is not None else None


# ---- the client and experiments ---------------------------------------------------------------
_READY: set[str] = set()


def client(uri: str):
    """An MlflowClient; a new SQLite store is created under a file lock, because concurrent
    first use by several processes races in MLflow's schema migration, and as a copy of the
    cache's empty store (`_empty_store`) when it can be."""
    from mlflow.tracking import MlflowClient

    db = sqlite_path(uri)
    if db is None or uri in _READY:
        return MlflowClient(tracking_uri=uri)
    with FileLock(db.with_name(db.name + ".lock"), creating=str(db)):
        if not _has_data(db):
            _copy_empty_store(db)
        cl = MlflowClient(tracking_uri=uri)
        cl.search_experiments(max_results=1)
    _READY.add(uri)
    return cl


def _has_data(db: Path) -> bool:
    try:
        return db.stat().st_size > 0
    except FileNotFoundError:
        return False


def _copy_empty_store(db: Path) -> None:
    """Put a copy of `_empty_store()` at `db` (staged beside it, then renamed); with none to copy
    (the cache cannot be written) or a copy that cannot be written, MLflow makes the store itself."""
    empty = _empty_store()
    if empty is None:
        return
    staged = db.with_name(f".{db.name}.{os.getpid()}.new")
    try:
        db.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(empty, staged)
        os.replace(staged, db)
    except OSError:  # a full disk, a folder that cannot be written: MLflow says so in its own words
        staged.unlink(missing_ok=True)


def _empty_store_path() -> Path:
    import mlflow

    from ..data.tokenizers import cache_dir  # lazy: imports numpy and the data package, for a new store only

    return cache_dir("mlflow-stores") / f"mlflow-{mlflow.__version__}.db"


def _empty_store() -> Path | None:
    """An empty SQLite store with this MLflow's schema, made once per MLflow version in the cache
    (GATESWEEP_CACHE/mlflow-stores/): MLflow makes a new store by running each of its schema
    migrations, about 1 CPU-s, and every `gatesweep run` in a new folder makes one; a copy takes
    milliseconds. It holds no experiment: MLflow adds its Default experiment (id 0) on first
    opening a store, with that store's own artifact location, as in a store it makes. One that is
    not such a store (a damaged file) is made again; MLflow checks the schema version of each copy
    it opens. None when the cache cannot be written."""
    from mlflow.tracking import MlflowClient

    try:
        path = _empty_store_path()
        with FileLock(path.with_name(f"{path.name}.lock")):
            if not _is_empty_store(path):
                staged = path.with_name(f".{path.name}.{os.getpid()}.new")
                staged.unlink(missing_ok=True)
                MlflowClient(tracking_uri=sqlite_uri(staged)).search_experiments(max_results=1)
                with contextlib.closing(sqlite3.connect(staged)) as con, con:
                    con.execute("DELETE FROM experiment_tags WHERE experiment_id = 0")
                    con.execute("DELETE FROM experiments WHERE experiment_id = 0")
                os.replace(staged, path)
        return path
    except Exception:  # the cache is a shortcut: whatever keeps it from working, MLflow makes the store
        return None


def _is_empty_store(path: Path) -> bool:
    """`path` is a SQLite file with MLflow's schema version recorded and no experiment."""
    if not _has_data(path):
        return False
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as con:
            return (
                bool(con.execute("SELECT version_num FROM alembic_version").fetchall())
                and not con.execute("SELECT 1 FROM experiments LIMIT 1").fetchall()
            )
    except sqlite3.Error:
        return False


def get_or_create_experiment(cl, name: str, uri: str) -> str:
    """The experiment's id, created when missing; either way a model-training experiment in
    MLflow's terms (`views.mark_training_experiment`)."""
    exp = cl.get_experiment_by_name(name)
    if exp is not None:
        if exp.lifecycle_stage == "deleted":
            cl.restore_experiment(exp.experiment_id)
        mark_training_experiment(cl, exp)
        return exp.experiment_id
    root = default_artifact_root(uri)
    location = f"{root}/{re.sub(r'[^A-Za-z0-9_.-]+', '_', name)}" if root else None
    try:
        return cl.create_experiment(name, artifact_location=location, tags={EXPERIMENT_KIND_TAG: TRAINING_KIND})
    except Exception:
        exp = cl.get_experiment_by_name(name)  # created concurrently by another process
        if exp is None:
            raise
        return exp.experiment_id


# ---- paginated queries ------------------------------------------------------------------------
def all_pages(fetch: Callable[[str | None], Any]) -> list:
    """Every item of a paginated MLflow query: `fetch(page_token)` returns one page (a list with
    a `.token`, empty on the last page)."""
    out: list = []
    token = None
    while True:
        page = fetch(token)
        out.extend(page)
        token = page.token
        if not token:
            return out


def search_all(cl, experiment_ids: list[str], filter_string: str = "", *, order_by: list[str] | None = None, page: int = PAGE) -> list:
    """Every run matching the filter, all pages, in `order_by` order."""
    return all_pages(
        lambda token: cl.search_runs(experiment_ids, filter_string=filter_string, max_results=page, order_by=order_by, page_token=token)
    )


def all_experiments(cl) -> list:
    """Every active experiment of the store."""
    return all_pages(lambda token: cl.search_experiments(max_results=1000, page_token=token))


def quoted(value: str) -> str:
    """`value` as a string literal in an MLflow filter (a quote escaped: `'it\\'s'`)."""
    return "'" + value.replace("'", "\\'") + "'"
