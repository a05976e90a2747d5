"""Sweep files: the typed spec (search, scheduler, resources, axes) and its strict loading; its
checks are `spec.sweep_checks`, expansion into trials is `spec.expand`.

A sweep file is a `SweepSpec`. Expansion takes the cartesian product of the `grid` axes and the
`zip` groups (axes varied together), drops `exclude`d cells, normalises the gate of every cell
(fields that do not apply, such as the granularity of a `none` gate, are reset), validates each
cell as a `TrialConfig`, and drops duplicates by config hash. Every problem of every cell is
reported at once, before anything is launched.

Beyond each trial's own validity, expansion checks what Ray Tune would otherwise reject only after
the sweep's runs were written: the scheduler's settings against the trials' steps, the metric of
the scheduler and of the search against what the trials report (`REPORTED_METRICS`), and every
value an Optuna space can sample against the field it sets.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gatedmodels.typedconfig import Config, ConfigError, Issue, Limits, deep_merge, show
from orchestrator.ladder.config import LadderConfig
from orchestrator.ladder.plan import plan_rungs
from orchestrator.spec.files import load_yaml
from orchestrator.spec.overrides import Overrides
from orchestrator.spec.paths import resolve_paths, resolve_value, touches_paths
from orchestrator.spec.search import ResourcesConfig, SchedulerConfig, SearchConfig
from orchestrator.spec.sweep_checks import sweep_problems
from orchestrator.spec.trial import SECTIONS, TrackingConfig, TrialConfig

__all__ = ["NAME_RE", "SECTIONS", "SweepSpec", "apply_smoke", "load_sweep", "resolve_sweep_paths", "sweep_data"]

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")


@dataclass(kw_only=True, frozen=True)
class SweepSpec(Config):
    """A sweep file."""

    name: str
    """Names the MLflow parent run and the sweep's state folder (letters, digits, . _ -)."""
    description: str = ""
    """Free text, shown in the report."""
    base: dict[str, Any] = field(default_factory=dict)
    """A trial config, as for `gatesweep train` (model, data, train, deepspeed, eval)."""
    grid: dict[str, list[Any]] = field(default_factory=dict)
    """Cartesian product over dotted paths, e.g. {model.gate.position: [none, G1]}."""
    zip: list[dict[str, list[Any]]] = field(default_factory=list)
    """Groups of axes varied together: in a group, all lists have one length and the i-th values go together."""
    exclude: list[dict[str, Any]] = field(default_factory=list)
    """Cells to skip: a cell matching every pair of an entry is dropped."""
    search: SearchConfig = field(default_factory=SearchConfig)
    """Grid, or Optuna within each grid arm."""
    ladder: LadderConfig | None = None
    """The size axis as a scaling ladder: rungs with token-matched (or compute-matched) budgets (`orchestrator.ladder`)."""
    scheduler: SchedulerConfig | None = None
    """Optional early stopping (ASHA)."""
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    """Resources per trial."""
    retries: int = 1
    """Times a trial that crashed (not one that diverged) is retried, from its last checkpoint."""
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    """MLflow experiment and tracking URI."""

    LIMITS = Limits({"retries": (0, 100)})

    def problems(self) -> list[Issue]:
        """Every problem of the file in one round: its name's, then the rest (`spec.sweep_checks`)."""
        out = (
            [] if NAME_RE.fullmatch(self.name) else [Issue("name", f"got {show(self.name)}; allowed: 1-100 letters, digits, '.', '_', '-'")]
        )
        return out + sweep_problems(self)

    def rung_plans(self, base: TrialConfig | None = None) -> list:
        """The ladder's rungs resolved against the base (`orchestrator.ladder.plan.plan_rungs`); [] without a ladder."""
        if self.ladder is None:
            return []
        base = base or TrialConfig.from_dict(self.base)
        return plan_rungs(self.ladder, base.model, base.train, base.data, self.resources.workers_per_trial)


def resolve_sweep_paths(data: dict, folder: str | Path) -> dict:
    """Make the local paths of a raw sweep dict absolute against `folder` (the sweep file's),
    in place: the base's, and those of grid, zip, exclude and Optuna `choice` values at a path
    field (see `orchestrator.spec.paths.resolve_paths`). Ray runs trials in other directories."""
    resolve_paths(data.get("base"), folder)

    def each(value: Any, kind: type) -> list:
        return [v for v in value if isinstance(v, kind)] if isinstance(value, list) else []

    groups = ([data["grid"]] if isinstance(data.get("grid"), dict) else []) + each(data.get("zip"), dict)
    for group in groups:
        for axis, values in group.items():
            if touches_paths(axis) and isinstance(values, list):
                group[axis] = [resolve_value(axis, v, folder) for v in values]
    for entry in each(data.get("exclude"), dict):
        for axis, value in entry.items():
            if touches_paths(axis):
                entry[axis] = resolve_value(axis, value, folder)
    search = data.get("search")
    space = search.get("space") if isinstance(search, dict) else None
    for axis, dist in space.items() if isinstance(space, dict) else ():
        if touches_paths(axis) and isinstance(dist, dict) and isinstance(dist.get("choice"), list):
            dist["choice"] = [resolve_value(axis, v, folder) for v in dist["choice"]]
    return data


def sweep_data(path: str | Path, *, base_dir: str | Path | None = None, overrides: Overrides | None = None) -> dict:
    """A sweep file's raw dict as a launch uses it: its local paths absolute against `base_dir`
    (by default the file's folder) and the command line's overrides applied (their paths against
    the working directory); ConfigError naming the file for an override that cannot apply."""
    folder = Path(base_dir) if base_dir is not None else Path(path).expanduser().absolute().parent
    data = resolve_sweep_paths(load_yaml(path), folder)
    if overrides:
        try:
            data = overrides.apply(data, Path.cwd())
        except ConfigError as err:
            raise err.with_source(str(path)) from None
    return data


def load_sweep(path: str | Path, *, base_dir: str | Path | None = None, overrides: Overrides | None = None) -> SweepSpec:
    """Load and strictly validate a sweep file (expansion is separate: `expand`); its local
    paths are made absolute against `base_dir`, by default the file's folder, and `overrides`
    (`--set`, `--grid`) applied first, so they are validated as the file is."""
    data = sweep_data(path, base_dir=base_dir, overrides=overrides)
    try:
        return SweepSpec.from_dict(data)
    except ConfigError as err:
        where = f"{path} with {overrides.describe()}" if overrides else str(path)
        raise err.with_source(where) from None


def apply_smoke(spec: SweepSpec, steps: int = 4) -> SweepSpec:
    """A copy that runs every trial for a few steps: catches broken cells before a real launch.

    The smoke settings win over the sweep's axes as well as its base: a grid or zip over
    `train.steps` (or another setting below) takes the smoke value in every cell, so no cell
    trains for its full length; cells that become identical are dropped as duplicates, and an
    exclusion naming such a setting applies at the smoke value. The copy is self-contained (it is
    what the sweep's state folder keeps), so a resumed smoke sweep stays a smoke sweep."""
    smoke = {
        # no warmup: a WSD-S schedule's decays of 4 steps end at steps 1, 2 and 4, each after the warmup
        "train": {"steps": steps, "eval_every": 0, "log_every": 1, "checkpoint_every": 0, "warmup_steps": 0},
        "eval": {"batches": 1, "batch_size": 4, "probe_sequences": 4, "ppl_windows": 4},
    }
    fixed = {f"{section}.{key}": value for section, values in smoke.items() for key, value in values.items()}
    grid = {path: ([fixed[path]] if path in fixed else values) for path, values in spec.grid.items()}
    zipped = [{path: ([fixed[path]] * len(values) if path in fixed else values) for path, values in group.items()} for group in spec.zip]
    exclude = [{path: fixed.get(path, value) for path, value in entry.items()} for entry in spec.exclude]
    base = deep_merge(spec.base, smoke)
    search = spec.search.replace(num_samples=min(spec.search.num_samples, 2))
    ladder = spec.ladder
    if ladder is not None:  # every rung at the smoke steps; shapes (and so the fits' inputs) as launched
        rungs = [r.replace(steps=steps, warmup_steps=smoke["train"]["warmup_steps"]) for r in ladder.rungs]
        ladder = ladder.replace(rungs=rungs)
    return spec.replace(
        name=f"{spec.name}-smoke", base=base, grid=grid, zip=zipped, exclude=exclude, search=search, scheduler=None, ladder=ladder
    )
