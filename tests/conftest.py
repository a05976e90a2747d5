"""Test-wide settings: offline hub, a private cache, CPU DeepSpeed, few threads."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

import pytest


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory):
    """Tokenised corpora and bigram tables are cached per test session, not in ~/.cache."""
    if "GATESWEEP_CACHE" not in os.environ:
        os.environ["GATESWEEP_CACHE"] = str(tmp_path_factory.mktemp("gatesweep-cache"))
    yield


@pytest.fixture(autouse=True)
def _environment_restored():
    """Each test starts from the same environment: an in-process call that sets a variable
    (`mlflow.set_tracking_uri` writes MLFLOW_TRACKING_URI into os.environ) must not send a later
    test's subprocesses to another test's store."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(scope="session")
def migrated_store(tmp_path_factory):
    """An empty SQLite MLflow store with MLflow's schema, built once per test session (its
    migrations take seconds); `tracking_uri` hands each test a copy of it."""
    from orchestrator.tracking import client

    db = tmp_path_factory.mktemp("migrated-store") / "mlflow.db"
    client(f"sqlite:///{db}").search_experiments(max_results=1)  # every write committed: the file is whole
    return db


@pytest.fixture
def tracking_uri(tmp_path, migrated_store):
    """A fresh store of the test's own: a copy of the session's migrated one."""
    import shutil

    shutil.copyfile(migrated_store, tmp_path / "mlflow.db")
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """One moto S3 server on 127.0.0.1 for the session (stopped by its pid at the end)."""
    from tests.services.s3 import MotoS3

    server = MotoS3(tmp_path_factory.mktemp("moto")).start()
    yield server
    server.stop()


@pytest.fixture
def s3(s3_server, monkeypatch):
    """The session's S3 server, emptied, with the standard AWS variables pointing at it; the
    test's own bucket `test-bucket` created. Returns the server (`.env()`, `.object_keys()`...)."""
    s3_server.reset()
    for k, v in s3_server.env().items():
        monkeypatch.setenv(k, v)
    s3_server.bucket("test-bucket")
    return s3_server


def has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def pytest_collection_modifyitems(config, items):
    if has_gpu():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# --- Slurm (tests/services/slurm.py): a real one-node slurmctld + slurmd + munged -------------


@pytest.fixture
def slurm(tmp_path_factory):
    """A one-node Slurm on 127.0.0.1, configured in a temporary folder, its daemons stopped by pid
    afterwards; skipped (saying why) where slurm-wlm and munge are not installed."""
    from tests.services.slurm import Slurm, missing

    why = missing()
    if why:
        pytest.skip(why)
    cluster = Slurm(tmp_path_factory.mktemp("slurm", numbered=True)).start()
    yield cluster
    cluster.stop()
