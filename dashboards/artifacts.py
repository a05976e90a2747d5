"""Per-run data for plots: metric histories and JSON artifacts, fetched only for the few runs a
plot shows (`search_runs` returns neither)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from orchestrator.spec.files import load_yaml
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


def sweep_file(cl_factory, parent: RunRecord) -> dict | None:
    """The sweep file a launch logged at the top of its parent run's artifacts (`NAME.yaml`, or
    whatever the file was called), parsed as a sweep file is (bounded, safe YAML), or None. A
    local artifact store is read in place; others are listed and downloaded through
    `cl_factory()`, an MlflowClient opened only then. Never raises: the file only orders levels."""

    def pick(paths: list[Path]) -> dict | None:
        docs = []
        for path in sorted(paths):
            try:
                doc = load_yaml(path)
            except Exception:  # UserError for a damaged file, OSError
                continue
            if isinstance(doc, dict):
                docs.append(doc)
        named = [d for d in docs if d.get("name") == parent.sweep]
        return (named or docs or [None])[0]

    folder = file_store_path(parent.artifact_uri) if parent.artifact_uri else None
    try:
        if folder is not None:
            return pick([p for p in folder.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file()]) if folder.is_dir() else None
        cl = cl_factory()
        listed = [a.path for a in cl.list_artifacts(parent.run_id) if not a.is_dir and a.path.endswith((".yaml", ".yml"))]
        if not listed:
            return None
        tmp = Path(tempfile.mkdtemp(prefix="gatesweep-sweepfile-"))
        try:
            return pick([Path(cl.download_artifacts(parent.run_id, path, str(tmp))) for path in listed[:4]])
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    except Exception:  # an unreachable artifact store: the fallback order applies
        return None
