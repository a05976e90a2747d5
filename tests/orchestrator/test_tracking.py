"""The tracking contract: URI resolution, parsing and redaction, run states, names, the one
paginator, and the logger's no-duplicate guarantee."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gatedmodels.typedconfig import ConfigError
from orchestrator.tracking import (
    RunLogger,
    client,
    file_store_path,
    get_or_create_experiment,
    names,
    redact_uri,
    resolve_tracking_uri,
    run_outcome,
    run_state,
    search_all,
    sqlite_path,
    sqlite_uri,
)
from orchestrator.tracking.names import OUTCOME_TAG, REASON_TAG, STOPPED_TAG


def test_default_is_absolute_sqlite_in_cwd(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert resolve_tracking_uri(cwd=tmp_path) == f"sqlite:///{tmp_path / 'mlflow.db'}"


def test_explicit_beats_env_and_relative_paths_become_absolute(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///env.db")
    assert resolve_tracking_uri(cwd=tmp_path) == f"sqlite:///{tmp_path / 'env.db'}"
    assert resolve_tracking_uri("store.db", cwd=tmp_path) == f"sqlite:///{tmp_path / 'store.db'}"
    assert resolve_tracking_uri("http://127.0.0.1:5000", cwd=tmp_path) == "http://127.0.0.1:5000"
    assert resolve_tracking_uri("mlruns", cwd=tmp_path) == (tmp_path / "mlruns").as_uri()


@pytest.mark.parametrize("uri", ["ftp://x/y", "sqlite://", "sqlite:///no/such/folder/m.db", "http://"])
def test_bad_uris_are_config_errors(uri, tmp_path):
    with pytest.raises(ConfigError):
        resolve_tracking_uri(uri, cwd=tmp_path)


def test_credentials_are_redacted():
    assert redact_uri("https://alice:s3cret@mlflow.example.com/path?token=abc&x=1") == "https://***@mlflow.example.com/path?token=***&x=1"
    assert "s3cret" not in redact_uri("postgresql://u:s3cret@db:5432/mlflow")


def test_reopened_run_drops_points_already_logged(tracking_uri):
    first = RunLogger.create(tracking_uri, "e", run_name="r")
    for step in range(1, 6):
        first.log_metrics({"a": step * 1.0, "b": -step}, step)
    first.log_metrics({"only_early": 1.0}, 2)
    first.log_params({"x": 1, "nested.list": [1, 2]})
    first.flush()
    again = RunLogger(tracking_uri, first.run_id)
    for step in range(3, 9):  # a retry replays steps 3..5 before going further
        again.log_metrics({"a": step * 1.0, "only_early": 5.0}, step)
    again.log_params({"x": 1})  # same value again: fine
    again.finish()
    steps = sorted(m.step for m in again.client.get_metric_history(first.run_id, "a"))
    assert steps == [1, 2, 3, 4, 5, 6, 7, 8]
    assert sorted(m.step for m in again.client.get_metric_history(first.run_id, "only_early")) == list(range(2, 9))
    assert again.client.get_run(first.run_id).data.params["nested.list"] == "[1, 2]"


def test_store_uris_are_parsed_in_one_place(tmp_path):
    db = tmp_path / "m.db"
    assert sqlite_path(sqlite_uri(db)) == db and sqlite_uri(db) == f"sqlite:///{db}"
    assert sqlite_path("sqlite:///rel.db") == Path("rel.db")
    assert sqlite_path("http://127.0.0.1:5000") is None and sqlite_path("sqlite://") is None
    assert file_store_path((tmp_path / "a b").as_uri()) == tmp_path / "a b"
    assert file_store_path(sqlite_uri(db)) is None


@pytest.mark.parametrize(
    "status, tags, state, reason, outcome",
    [
        ("FINISHED", {OUTCOME_TAG: "finished"}, "finished", "", "finished"),
        ("FAILED", {OUTCOME_TAG: "diverged", REASON_TAG: "loss is nan"}, "failed", "loss is nan", "diverged"),
        ("FAILED", {}, "failed", "failed (no reason recorded)", "crashed"),
        (
            "KILLED",
            {OUTCOME_TAG: "stopped", STOPPED_TAG: "stopped by the scheduler at step 4"},
            "stopped",
            "stopped by the scheduler at step 4",
            "stopped",
        ),
        ("KILLED", {OUTCOME_TAG: "interrupted", REASON_TAG: "interrupted"}, "interrupted", "interrupted", "interrupted"),
        (
            "KILLED",
            {REASON_TAG: "interrupted; `gatesweep resume s` continues it"},
            "interrupted",
            "interrupted; `gatesweep resume s` continues it",
            "interrupted",
        ),
        ("KILLED", {OUTCOME_TAG: "interrupted"}, "interrupted", "interrupted", "interrupted"),
        ("KILLED", {}, "killed", "killed", ""),
        ("RUNNING", {}, "running", "", ""),
        ("SCHEDULED", {}, "scheduled", "", ""),
    ],
)
def test_run_state_of_every_ending(status, tags, state, reason, outcome):
    got = run_state(status, tags)
    assert (got.state, got.reason) == (state, reason) and tuple(got) == (state, reason)
    assert got.terminal == (state not in ("running", "scheduled"))
    assert run_outcome(status, tags) == outcome


def test_names_are_distinct():
    values = [v for k, v in vars(names).items() if k.isupper() and isinstance(v, str)]
    tags = [v for k, v in vars(names).items() if k.endswith(("_TAG", "_PREFIX"))]
    assert len(values) == len(set(values))
    assert all(t.startswith(("gatesweep.", "mlflow.")) for t in tags)
    assert names.axis_of(names.axis_tag("train.lr")) == "train.lr" and names.axis_of(names.SWEEP_TAG) is None


def test_search_all_reads_every_page(tracking_uri):
    cl = client(tracking_uri)
    exp = cl.create_experiment("paged")
    ids = {cl.create_run(exp, tags={names.SWEEP_TAG: "p"}).info.run_id for _ in range(5)}
    cl.create_run(exp, tags={names.SWEEP_TAG: "other"})
    found = search_all(cl, [exp], f"tags.`{names.SWEEP_TAG}` = 'p'", page=2, order_by=["attributes.start_time DESC"])
    assert {r.info.run_id for r in found} == ids and len(found) == 5


# ---- a new SQLite store: a copy of the cache's empty one ---------------------------------------------
NEW_TABLES = "Creating initial MLflow database tables"


@pytest.fixture
def made():
    """The stores MLflow made itself (its log line, from a logger that does not propagate)."""
    import logging

    class Seen(logging.Handler):
        def __init__(self):
            super().__init__(logging.INFO)
            self.records: list[str] = []

        def emit(self, record):
            self.records.append(record.getMessage())

        def clear(self):
            self.records.clear()

        def __bool__(self):
            return any(NEW_TABLES in m for m in self.records)

    seen, log = Seen(), logging.getLogger("mlflow.store.db.utils")
    level = log.level
    log.setLevel(logging.INFO)
    log.addHandler(seen)
    yield seen
    log.removeHandler(seen)
    log.setLevel(level)


def _store_facts(uri: str) -> dict:
    import sqlite3

    cl = client(uri)
    default = cl.get_experiment("0")
    with sqlite3.connect(sqlite_path(uri)) as con:
        tables = sorted(r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
        version = con.execute("SELECT version_num FROM alembic_version").fetchall()
    return {"default": (default.name, default.artifact_location, default.lifecycle_stage), "tables": tables, "version": version}


def test_a_new_store_is_a_copy_of_the_caches_empty_store_and_holds_what_mlflows_own_does(tmp_path, monkeypatch, made):
    """MLflow makes a store by running its schema migrations (about 1 CPU-s); gatesweep copies an
    empty one it made once into the cache. The copy has MLflow's tables and schema version, and its
    Default experiment is made by MLflow on first opening, at the artifact location MLflow gives a
    store it makes itself; runs are logged into it as into any store."""
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("GATESWEEP_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    first = f"sqlite:///{tmp_path / 'a' / 'mlflow.db'}"
    client(first)  # the cache's empty store is made (by MLflow), then copied
    assert bool(made) and list((tmp_path / "cache" / "mlflow-stores").glob("mlflow-*.db"))
    made.clear()
    second = f"sqlite:///{tmp_path / 'b' / 'mlflow.db'}"
    facts = _store_facts(second)
    assert not bool(made), "the second new store ran MLflow's migrations: not copied"
    own = f"sqlite:///{tmp_path / 'own.db'}"
    MlflowClient(tracking_uri=own).search_experiments(max_results=1)  # made by MLflow itself
    assert facts == _store_facts(own)
    cl = client(second)
    exp = get_or_create_experiment(cl, "e", second)
    run = cl.create_run(exp)
    cl.log_metric(run.info.run_id, "m", 1.5)
    assert cl.get_run(run.info.run_id).data.metrics == {"m": 1.5}
    assert [e.name for e in cl.search_experiments()] == ["e", "Default"]


@pytest.mark.parametrize("cache", ["damaged", "a file", "not a URI"])
def test_a_damaged_or_unusable_cache_leaves_mlflow_to_make_the_store(cache, tmp_path, monkeypatch, made):
    """The cache is a shortcut: an empty store there that is not one (random bytes) is made again
    by MLflow; with a cache that is a file, or a GATESWEEP_CACHE no store backs, MLflow makes the
    new store itself. Either way the store is whole."""
    root = tmp_path / "cache"
    if cache == "damaged":
        folder = root / "mlflow-stores"
        folder.mkdir(parents=True)
        import mlflow

        (folder / f"mlflow-{mlflow.__version__}.db").write_bytes(os.urandom(8192))
        monkeypatch.setenv("GATESWEEP_CACHE", str(root))
    elif cache == "a file":
        root.write_text("not a folder")
        monkeypatch.setenv("GATESWEEP_CACHE", str(root))
    else:
        monkeypatch.setenv("GATESWEEP_CACHE", "s3:/no-bucket")
    uri = f"sqlite:///{tmp_path / 'new' / 'mlflow.db'}"
    cl = client(uri)
    assert bool(made)
    assert cl.get_experiment("0").name == "Default"
    run = cl.create_run(get_or_create_experiment(cl, "e", uri))
    assert cl.get_run(run.info.run_id).info.status == "RUNNING"
    if cache == "damaged":  # it was made again, whole: the next new store is a copy of it
        made.clear()
        client(f"sqlite:///{tmp_path / 'next' / 'mlflow.db'}")
        assert not bool(made)


# ---- two writers of one new tag ----------------------------------------------------------------------
def _unique_key_error():
    """What MLflow's SQL store raises when another writer inserted the same new tag between its
    read and its insert: an MlflowException raised from SQLAlchemy's IntegrityError."""
    import sqlite3

    import sqlalchemy.exc
    from mlflow.exceptions import MlflowException

    cause = sqlalchemy.exc.IntegrityError(
        "INSERT INTO tags", {}, sqlite3.IntegrityError("UNIQUE constraint failed: tags.key, tags.run_uuid")
    )
    try:
        raise MlflowException(f"(sqlite3.IntegrityError) {cause.orig}") from cause
    except MlflowException as err:
        return err


def test_a_tag_write_that_raced_another_is_written_once_more(tracking_uri):
    """The driver recording why ASHA stopped a trial, while the stopped trial records the same:
    the second insert of one new tag fails on the table's unique key (CI met it: the sweep ended
    with "the tracking store failed"). Written again, it updates the row; a param logged twice
    with two values is not such a race, and is not retried."""
    from orchestrator.tracking.logger import raced, set_tags

    cl = client(tracking_uri)
    run = cl.create_run(get_or_create_experiment(cl, "e", tracking_uri)).info.run_id
    calls = []

    class Racing:
        def set_tag(self, run_id, key, value):
            calls.append(key)
            if len(calls) == 1:
                cl.set_tag(run_id, key, "the other writer's")
                raise _unique_key_error()
            cl.set_tag(run_id, key, value)

    set_tags(Racing(), run, {"gatesweep.stopped_early": "stopped by the scheduler (ASHA) at step 20", "gatesweep.outcome": "stopped"})
    assert calls == ["gatesweep.stopped_early", "gatesweep.stopped_early", "gatesweep.outcome"]
    tags = cl.get_run(run).data.tags
    assert tags["gatesweep.stopped_early"] == "stopped by the scheduler (ASHA) at step 20" and tags["gatesweep.outcome"] == "stopped"
    assert raced(_unique_key_error())
    cl.log_param(run, "p", 1)
    with pytest.raises(Exception) as conflict:
        cl.log_param(run, "p", 2)
    assert not raced(ValueError("x")) and "p" in str(conflict.value)


def test_many_writers_of_the_same_new_tags_at_once_all_succeed(tracking_uri):
    """The race for real: eight threads, each with its own client, write the same 20 new tags of
    one run at once, through `set_tags` and through the run logger; none fails, every tag is set."""
    import threading

    from orchestrator.tracking.logger import set_tags

    cl = client(tracking_uri)
    run = cl.create_run(get_or_create_experiment(cl, "e", tracking_uri)).info.run_id
    tags = {f"t{i}": f"v{i}" for i in range(20)}
    start, errors = threading.Barrier(8), []

    def write(k):
        try:
            start.wait()
            if k % 2:
                set_tags(client(tracking_uri), run, tags)
            else:
                RunLogger(tracking_uri, run, quiet=True).set_tags(tags)
        except Exception as err:  # the test's subject: any failure is counted
            errors.append(err)

    threads = [threading.Thread(target=write, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    got = cl.get_run(run).data.tags
    assert {k: got[k] for k in tags} == tags
