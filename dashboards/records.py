"""Plain records of a sweep's runs, as the dashboards read them from a store."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from orchestrator.tracking import names, run_state

GATE_AXIS = "model.gate"
"""The gate axis: its values are gate labels (`none`, `G1-elementwise`, ...)."""
BASELINE_GATE = "none"
BASELINE_AXES = {GATE_AXIS: BASELINE_GATE, "model.attention.kind": "softmax"}
"""The architecture axes and their baseline values. The baseline row is the ungated model with
plain softmax attention; every row that departs from it on these axes is compared with the
baseline row whose other axes are equal."""
KIND_SETTINGS = "model.attention."
"""Axes under this prefix besides `model.attention.kind` (`sigmoid_bias`, `sink_init`,
`softpick_eps`) are settings of an attention kind, part of the variant: a row's baseline need not
share them (softmax has none of them; the trial config hash resets them for kinds they do not
apply to)."""


def is_variant_setting(axis: str) -> bool:
    """Whether `axis` is a setting of an attention kind (see `KIND_SETTINGS`)."""
    return axis.startswith(KIND_SETTINGS) and axis not in BASELINE_AXES


BASELINE_TEXT = "no gate, softmax attention"
"""`BASELINE_AXES` in words, for headings and captions."""


class StoreError(ValueError):
    """A problem of the user's: no store at that URI, no such sweep, no such run."""


@dataclass
class RunRecord:
    """One MLflow run, flattened to what a report needs."""

    run_id: str
    name: str
    status: str
    """MLflow status: FINISHED, FAILED, KILLED, RUNNING, SCHEDULED."""
    state: str
    """One of `orchestrator.tracking.STATES` (`run_state`): FAILED is `failed`; KILLED is
    `stopped` (ASHA), `interrupted` or `killed`."""
    reason: str
    """Why a run did not finish (`gatesweep.failure_reason` / `gatesweep.stopped_early`), else ""."""
    params: dict[str, str]
    metrics: dict[str, float]
    """Final (latest) value of every metric."""
    tags: dict[str, str]
    start_time: int
    end_time: int | None
    experiment_id: str
    artifact_uri: str = ""
    """Where the run's artifacts live (a local file: URI is read directly)."""
    reused: bool = False
    """Finished in an earlier launch and reused by this one (tag `gatesweep.also_in.NAME`)."""
    axes: dict[str, str] = field(default_factory=dict)
    """Values of the sweep's axes (filled by `resolve_axes`)."""
    superseded: bool = False
    """Another run of the same seed cell counts instead (set by `dashboards.stats.compare`)."""

    @property
    def finished(self) -> bool:
        return self.state == "finished"

    @property
    def is_sweep(self) -> bool:
        """A sweep's parent run."""
        return self.tags.get(names.KIND_TAG) == names.SWEEP_KIND

    @property
    def sweep(self) -> str | None:
        return self.tags.get(names.SWEEP_TAG)


def make_record(
    run_id: str,
    run_name: str | None,
    status: str,
    *,
    params: dict[str, str],
    metrics: dict[str, float],
    tags: dict[str, str],
    start_time: Any,
    end_time: int | None,
    experiment_id: Any,
    artifact_uri: str | None,
    reused: bool = False,
) -> RunRecord:
    """A RunRecord, its state and name derived from its status and tags."""
    state, reason = run_state(status, tags)
    return RunRecord(
        run_id=run_id,
        name=tags.get(names.TRIAL_NAME_TAG) or run_name or run_id[:8],
        status=status,
        state=state,
        reason=reason,
        params=params,
        metrics=metrics,
        tags=tags,
        start_time=int(start_time or 0),
        end_time=end_time,
        experiment_id=str(experiment_id),
        artifact_uri=artifact_uri or "",
        reused=reused,
    )


def record(run, *, reused: bool = False) -> RunRecord:
    """The record of an MLflow `Run` (from `search_runs` or `get_run`)."""
    info, data = run.info, run.data
    return make_record(
        info.run_id,
        info.run_name,
        info.status,
        params=dict(data.params),
        metrics={k: float(v) for k, v in data.metrics.items()},
        tags=dict(data.tags),
        start_time=info.start_time,
        end_time=info.end_time,
        experiment_id=info.experiment_id,
        artifact_uri=info.artifact_uri,
        reused=reused,
    )


@dataclass
class SweepRuns:
    """A sweep as the store holds it."""

    name: str
    uri: str
    """The tracking URI, credentials redacted."""
    experiment_id: str
    experiment: str
    parent: RunRecord
    runs: list[RunRecord]
    launches: int
    """How many parent runs carry this sweep's name (the newest is used unless one is named)."""
    axes: list[str] = field(default_factory=list)
    """Axis paths that vary among `runs` (seed axes included), in the sweep's order."""
    search: str = "grid"
    read_s: float = 0.0
    sweep_file: dict | None = None
    """The sweep file the launch logged on its parent run, as YAML read it (None when there is
    none or it cannot be read): the order of each axis' values (`dashboards.levels`)."""


def check_parent(parent: RunRecord | None, parent_id: str, name: str | None) -> RunRecord:
    """`parent` when it is the parent run of a sweep (of sweep `name`, when given); else StoreError."""
    if parent is None:
        raise StoreError(f"no run {parent_id!r} in this store")
    if not parent.is_sweep:
        raise StoreError(f"run {parent_id} is not a sweep's parent run (no tag {names.KIND_TAG}={names.SWEEP_KIND})")
    if name and parent.sweep != name:
        raise StoreError(f"run {parent_id} is the parent of sweep {parent.sweep!r}, not {name!r}")
    return parent


def no_such_sweep(name: str, experiment: str | None, sweeps: list[str]) -> StoreError:
    where = f"experiment {experiment!r}" if experiment else "this store"
    return StoreError(f"no sweep named {name!r} in {where}; sweeps there: {', '.join(sweeps) if sweeps else 'none'}")


def no_such_experiment(experiment: str, experiments: list[str]) -> StoreError:
    return StoreError(f"no experiment named {experiment!r}; experiments: {', '.join(sorted(experiments)) or 'none'}")


def finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
