"""Per-run data for plots: metric histories and JSON artifacts, fetched only for the few runs a
plot shows (`search_runs` returns neither)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from orchestrator.tracking import file_store_path

from .records import RunRecord

os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # no progress bars on stderr per download


def metric_history(cl, run_id: str, key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one metric of one run, ordered by step; empty when absent."""
    try:
        points = cl.get_metric_history(run_id, key)
    except Exception:
        return [], []
    by_step: dict[int, float] = {}
    for m in sorted(points, key=lambda m: (m.step, m.timestamp)):
        by_step[int(m.step)] = float(m.value)
    steps = sorted(by_step)
    return steps, [by_step[s] for s in steps]


def local_artifact(artifact_uri: str, path: str) -> Path | None:
    """The file of an artifact in a local (file:) artifact store, when it is there."""
    folder = file_store_path(artifact_uri)
    if folder is None:
        return None
    f = folder / path
    return f if f.is_file() else None


def json_artifact(cl, run_id: str, path: str, tmp: Path, artifact_uri: str = "") -> dict | None:
    """A run's JSON artifact, or None when it is missing or unreadable (older runs lack some).
    Local artifact stores are read in place; others are downloaded through the client."""
    try:
        local = local_artifact(artifact_uri, path)
        if local is None:
            dst = tmp / run_id
            dst.mkdir(parents=True, exist_ok=True)
            local = Path(cl.download_artifacts(run_id, path, str(dst)))
        data = json.loads(local.read_text())
    except Exception:
        return None
    return data if isinstance(data, dict) else None


class ArtifactCache:
    """Downloads JSON artifacts once per report into a temporary folder (removed on close)."""

    def __init__(self, cl):
        self.cl = cl
        self.tmp = Path(tempfile.mkdtemp(prefix="gatesweep-report-"))
        self._cache: dict[tuple[str, str], dict | None] = {}

    def get(self, run: RunRecord, path: str) -> dict | None:
        key = (run.run_id, path)
        if key not in self._cache:
            self._cache[key] = json_artifact(self.cl, run.run_id, path, self.tmp, run.artifact_uri)
        return self._cache[key]

    def close(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)
