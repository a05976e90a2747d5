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


@pytest.fixture
def tracking_uri(tmp_path):
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


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
