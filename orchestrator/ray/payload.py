"""What crosses the Ray boundary into a trial: a typed payload.

The launcher builds and carries `TrialPayload` objects; only at the Ray boundary do they become
dicts of plain data (`to_dict`: Tune's param_space, Ray Train's loop config, where the trial's
folder is its URI), and the trainable's first line makes one typed again (`from_dict`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from orchestrator.storage import Location


@dataclass(kw_only=True)
class TrialPayload:
    config: dict[str, Any]
    """The trial config as a plain dict (TrialConfig.to_dict); Optuna samples are written into it."""
    config_hash: str
    name: str
    """The trial's run name."""
    run_id: str | None
    """Its MLflow run, created before launch (grid); None for Optuna trials (created per Tune trial)."""
    run_dir: Location
    """The folder of its checkpoints and artifacts: local (absolute), or on an object store; then
    the trial works in a local scratch folder synchronised with it (`trainable.local_run_dir`)."""
    tracking_uri: str
    """Redacted; the real URI reaches workers in GATESWEEP_TRACKING_URI."""
    experiment: str
    parent_run_id: str
    sweep: str
    workers: int = 1
    cpus: float = 1.0
    gpus: float = 0.0
    tags: dict[str, str] = field(default_factory=dict)
    judged_by: list[str] = field(default_factory=list)
    """Metrics the scheduler and searcher read from every result (NaN when the trial failed)."""
    sampled: dict[str, Any] = field(default_factory=dict)
    """Optuna: the values sampled for this trial."""

    def to_dict(self) -> dict[str, Any]:
        """Plain data for Ray (the folder as its URI)."""
        return {**dataclasses.asdict(self), "run_dir": self.run_dir.uri}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialPayload:
        return cls(**{**data, "run_dir": Location.parse(data["run_dir"])})

    def replace(self, **changes: Any) -> TrialPayload:
        return dataclasses.replace(self, **changes)
