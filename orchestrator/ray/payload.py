"""What crosses the Ray boundary into a trial: a typed payload (plain data, absolute paths).

It travels through Tune's param_space as a dict (`to_dict`) and becomes typed again on the
trainable's first line (`from_dict`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass(kw_only=True)
class TrialPayload:
    config: dict[str, Any]
    """The trial config as a plain dict (TrialConfig.to_dict); Optuna samples are written into it."""
    config_hash: str
    name: str
    """The trial's run name."""
    run_id: str | None
    """Its MLflow run, created before launch (grid); None for Optuna trials (created per Tune trial)."""
    run_dir: str
    """Absolute folder of its checkpoints and artifacts, or its object-store URI (s3://...): then
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
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialPayload:
        return cls(**data)

    def replace(self, **changes: Any) -> TrialPayload:
        return dataclasses.replace(self, **changes)
