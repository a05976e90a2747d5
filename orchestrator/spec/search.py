"""How a sweep chooses and runs its trials: the search (grid or Optuna, with its space), the scheduler
(ASHA) and the resources of each trial."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from gatedmodels.typedconfig import Config, Issue, Limits, show
from orchestrator.core.bounds import MAX_STEPS
from orchestrator.spec.reported import metric_problem


@dataclass(kw_only=True, frozen=True)
class SearchConfig(Config):
    """How trials are chosen: the full grid, or Optuna within each grid arm."""

    type: Literal["grid", "optuna"] = "grid"
    """`grid`: one trial per expanded cell. `optuna`: for each grid arm, `num_samples` trials
    sampled by Optuna from `space` (Ray Tune's OptunaSearch)."""
    num_samples: int = 8
    """Optuna: trials per grid arm."""
    metric: str = "val_loss"
    """Optuna (and ASHA, unless it sets its own): the metric to optimise."""
    mode: Literal["min", "max"] = "min"
    """Minimise or maximise `metric`."""
    sampler: Literal["tpe", "random"] = "tpe"
    """Optuna sampler."""
    seed: int = 0
    """Seed of the sampler."""
    space: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Optuna: dotted path -> distribution, one of {loguniform: [lo, hi]}, {uniform: [lo, hi]},
    {int: [lo, hi]}, {choice: [a, b, ...]}."""

    LIMITS = Limits({"num_samples": (None, 10_000), "seed": (0, 2**32 - 1)})  # Optuna's samplers take 32-bit seeds

    def problems(self) -> list[Issue]:
        out = []
        problem = metric_problem(self.metric)
        if problem:
            out.append(Issue("metric", problem))
        if self.type == "optuna":
            if self.num_samples < 1:
                out.append(Issue("num_samples", f"got {self.num_samples}; allowed: >= 1"))
            if not self.space:
                out.append(Issue("space", "an optuna search needs at least one dimension, e.g. {train.lr: {loguniform: [1e-4, 1e-2]}}"))
        # each dimension's distribution is checked by SweepSpec.problems, with the values it
        # samples: a bad dimension then does not hide the rest of the sweep file's problems
        return out


def _distribution_problems(dist: dict) -> list[Issue]:
    kinds = ("loguniform", "uniform", "int", "choice")
    if len(dist) != 1 or next(iter(dist)) not in kinds:
        return [Issue("", f"got {show(dist)}; expected one of {', '.join(f'{{{k}: ...}}' for k in kinds)}")]
    kind, args = next(iter(dist.items()))
    if kind == "choice":
        return [] if isinstance(args, list) and args else [Issue(kind, f"got {show(args)}; expected a non-empty list")]
    bounds = numeric_bounds(args)
    if bounds is None:
        return [Issue(kind, f"got {show(args)}; expected [low, high], two finite numbers")]
    lo, hi = bounds
    if not lo < hi:
        return [Issue(kind, f"got [{lo}, {hi}]; low must be below high")]
    if kind == "loguniform" and lo <= 0:
        return [Issue(kind, f"got [{lo}, {hi}]; loguniform needs low > 0")]
    if kind == "int" and not all(float(a).is_integer() for a in args):
        return [Issue(kind, f"got [{lo}, {hi}]; expected integers")]
    return []


def numeric_bounds(args: Any) -> tuple[float, float] | None:
    """[low, high] as finite numbers; YAML 1.1 reads 1e-4 (no dot) as a string, so strings are parsed."""
    if not isinstance(args, list) or len(args) != 2:
        return None
    out = []
    for a in args:
        if isinstance(a, bool):
            return None
        try:
            out.append(float(a))
        except (TypeError, ValueError, OverflowError):
            return None
    if not all(math.isfinite(x) for x in out):
        return None
    return out[0], out[1]


@dataclass(kw_only=True, frozen=True)
class SchedulerConfig(Config):
    """Early stopping of weak trials (Ray Tune's ASHA)."""

    type: Literal["asha", "fifo"] = "asha"
    """`asha`: asynchronous successive halving; `fifo`: run every trial to the end."""
    metric: str = "val_loss"
    """Metric compared at each evaluation."""
    mode: Literal["min", "max"] = "min"
    """Minimise or maximise `metric`."""
    grace_period: int = 100
    """Steps before a trial can be stopped."""
    max_t: int = 0
    """Longest trial in steps; 0: train.steps."""
    reduction_factor: float = 3.0
    """ASHA's halving rate."""

    LIMITS = Limits({"grace_period": (1, MAX_STEPS), "max_t": (0, MAX_STEPS), "reduction_factor": (None, 1000)})

    def problems(self) -> list[Issue]:
        out = []
        if self.reduction_factor <= 1:
            out.append(Issue("reduction_factor", f"got {self.reduction_factor}; allowed: > 1"))
        if 0 < self.max_t < self.grace_period:
            out.append(Issue("max_t", f"got {self.max_t}; allowed: 0 (train.steps) or >= grace_period ({self.grace_period})"))
        problem = metric_problem(self.metric)
        if problem:
            out.append(Issue("metric", problem))
        return out


@dataclass(kw_only=True, frozen=True)
class ResourcesConfig(Config):
    """Resources of each trial on the Ray cluster."""

    workers_per_trial: int = 1
    """DeepSpeed processes per trial; > 1 runs the trial across Ray Train workers."""
    cpus_per_worker: float = 1.0
    """CPUs reserved per worker (also its torch thread count on CPU)."""
    gpus_per_worker: float = 0.0
    """GPUs per worker."""
    max_concurrent: int = 0
    """Trials running at once; 0: as many as the cluster's CPUs (and GPUs) allow."""

    LIMITS = Limits(
        {"workers_per_trial": (1, 4096), "cpus_per_worker": (None, 1024), "gpus_per_worker": (0, 64), "max_concurrent": (0, 10_000)}
    )

    def problems(self) -> list[Issue]:
        out = []
        if self.cpus_per_worker <= 0:
            out.append(Issue("cpus_per_worker", f"got {self.cpus_per_worker}; allowed: > 0"))
        for name in ("cpus_per_worker", "gpus_per_worker"):
            q = getattr(self, name)
            if q > 1 and not float(q).is_integer():
                out.append(Issue(name, f"got {q}; allowed: a share of one (0..1) or a whole number"))
            elif abs(q * 10_000 - round(q * 10_000)) > 1e-6:  # Ray's resource unit
                out.append(Issue(name, f"got {q}; allowed: multiples of 0.0001"))
        return out
