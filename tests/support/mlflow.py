"""Reading what a sweep wrote into an MLflow store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlflow.tracking import MlflowClient

from orchestrator.tracking import client


def sqlite_store(folder: Path) -> MlflowClient:
    """A client of `folder/mlflow.db` (created under the store-creation lock)."""
    return client(sqlite_uri(folder))


def sqlite_uri(folder: Path) -> str:
    return f"sqlite:///{folder / 'mlflow.db'}"


def runs_of(mlflow: MlflowClient, sweep: str, experiment: str = "e") -> list[Any]:
    """Every run of `sweep` in `experiment` (the parent and its trials); none for a store the
    launch opened but wrote no run into."""
    exp = mlflow.get_experiment_by_name(experiment)
    if exp is None:
        return []
    return mlflow.search_runs([exp.experiment_id], filter_string=f"tags.`gatesweep.sweep` = '{sweep}'", max_results=1000)


def children(mlflow: MlflowClient, sweep: str) -> list[Any]:
    """The trial runs of `sweep` (its parent run left out)."""
    return [r for r in runs_of(mlflow, sweep) if r.data.tags.get("gatesweep.kind") != "sweep"]


def steps(mlflow: MlflowClient, run_id: str, key: str = "train/loss") -> list[int]:
    """The steps at which `key` was logged in the run."""
    return [m.step for m in mlflow.get_metric_history(run_id, key)]


def history(mlflow: MlflowClient, run_id: str, key: str = "train/loss") -> list[tuple[int, float]]:
    """`key`'s (step, value) points in the run, by step."""
    return [(m.step, m.value) for m in sorted(mlflow.get_metric_history(run_id, key), key=lambda m: m.step)]
