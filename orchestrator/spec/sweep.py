"""Sweep files: the typed spec (search, scheduler, resources, axes) and its strict loading; expansion
into trials is `spec.expand`.

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

import copy
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from gatedmodels import ModelConfig
from gatedmodels.typedconfig import Config, ConfigError, Issue, Limits, deep_merge, did_you_mean, field_type, set_dotted, show
from orchestrator.ladder.config import LadderConfig
from orchestrator.ladder.plan import axis_problems, plan_rungs, rung_names
from orchestrator.ladder.runs import RUNG_AXIS
from orchestrator.spec.data import DataConfig
from orchestrator.spec.evaluation import EvalConfig
from orchestrator.spec.overrides import Overrides
from orchestrator.spec.paths import resolve_paths, resolve_value, touches_paths
from orchestrator.spec.search import ResourcesConfig, SchedulerConfig, SearchConfig, _distribution_problems, numeric_bounds
from orchestrator.spec.train import DeepSpeedConfig, TrainConfig
from orchestrator.spec.trial import TrackingConfig, TrialConfig

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
SECTIONS: dict[str, type[Config]] = {
    "model": ModelConfig,
    "data": DataConfig,
    "train": TrainConfig,
    "deepspeed": DeepSpeedConfig,
    "eval": EvalConfig,
}
MAX_CELLS = 100_000
"""Most cells a sweep's grid and zip groups may expand to (10,000 validate in a third of a second)."""
MAX_PROBES = 200


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
        """Every problem of the file in one round: the base's, the axes' (paths, lengths,
        exclusions), each grid and zip value's in the cells that have it (beyond the base's own
        problems), and each value an Optuna space can sample."""
        out: list[Issue] = []
        if not NAME_RE.fullmatch(self.name):
            out.append(Issue("name", f"got {show(self.name)}; allowed: 1-100 letters, digits, '.', '_', '-'"))
        base_issues = self._base_problems(out)
        axes: dict[str, str] = {}
        unusable: set[str] = set()  # axes (grid paths, `zip[i]` groups) left out of the cells' check
        for path, values in self.grid.items():
            found = [i.prefixed(f"grid.{path}") for i in _path_problems(path)]
            if not values:
                found.append(Issue(f"grid.{path}", "is empty; give at least one value"))
            out += found
            unusable |= {f"grid.{path}"} if found else set()
            axes[path] = f"grid.{path}"
        for g, group in enumerate(self.zip):
            lengths = {len(v) for v in group.values()}
            found = []
            if not group:
                found.append(Issue(f"zip[{g}]", "is empty"))
            elif len(lengths) != 1:
                found.append(Issue(f"zip[{g}]", f"lists of a zip group must have one length; got {sorted(lengths)}"))
            elif 0 in lengths:
                found.append(Issue(f"zip[{g}]", "is empty; give at least one value"))
            for path in group:
                found += [i.prefixed(f"zip[{g}].{path}") for i in _path_problems(path)]
                if path in axes:
                    found.append(Issue(f"zip[{g}].{path}", f"is already an axis ({axes[path]})"))
                axes[path] = f"zip[{g}]"
            out += found
            unusable |= {f"zip[{g}]"} if found else set()
        if self.ladder is not None:
            out += axis_problems([(p, w) for p, w in axes.items()] + [(p, f"search.space.{p}") for p in self.search.space])
            axes[RUNG_AXIS] = "ladder.rungs"
            out += self._ladder_problems()
            promote = self.ladder.promote
            arm_axes = [a for a in axes if a != RUNG_AXIS and a.rsplit(".", 1)[-1] != "seed"]
            for key in promote.baseline if promote is not None else {}:
                inside = any(key.startswith(a + ".") or a.startswith(key + ".") for a in arm_axes)  # model.gate.position, model.gate
                if key not in arm_axes and not inside:
                    out.append(
                        Issue(
                            f"ladder.promote.baseline.{key}", f"is not an arm axis of this sweep; arm axes: {', '.join(arm_axes) or 'none'}"
                        )
                    )
        for e, entry in enumerate(self.exclude):
            if not entry:
                out.append(Issue(f"exclude[{e}]", "is empty (it would exclude every cell)"))
            for path in entry:
                if path not in axes:
                    out.append(Issue(f"exclude[{e}].{path}", f"is not an axis of grid or zip; axes: {', '.join(axes) or 'none'}"))
        for path, dist in self.search.space.items():
            out += [i.prefixed(f"search.space.{path}") for i in _path_problems(path)]
            out += [i.prefixed(f"search.space.{path}") for i in _distribution_problems(dist)]
            if path in axes:
                out.append(Issue(f"search.space.{path}", f"is also a grid/zip axis ({axes[path]}); search it or grid it, not both"))
        if self.search.type == "grid" and self.search.space:
            out.append(Issue("search.space", "is only used by search type 'optuna'"))
        overlapping = _overlapping_axes({**axes, **{p: f"search.space.{p}" for p in self.search.space}})
        out += overlapping
        unusable |= {i.path for i in overlapping}
        out += _exclude_value_problems(self)
        cells = math.prod(len(v) for v in self.grid.values()) * math.prod(len(next(iter(g.values()), [])) for g in self.zip)
        cells *= len(self.ladder.rungs) if self.ladder is not None else 1
        if cells > MAX_CELLS:
            out.append(Issue("grid", f"expands to {cells:,} cells; allowed: at most {MAX_CELLS:,} (split the sweep into several files)"))
        else:
            from orchestrator.spec.expand import cell_problems  # expand builds on this module

            # every value of the usable axes is checked even when another axis is broken (all problems at once)
            out += cell_problems(self._without(unusable), known=base_issues)
        out += _space_problems(self)  # it skips the dimensions reported above
        return out

    def _base_problems(self, out: list[Issue]) -> list[str]:
        """The base's own problems (appended to `out`, prefixed), except those at a path an axis sets;
        their texts, so that the cells' check does not report them again."""
        if "tracking" in self.base:
            out.append(Issue("base.tracking", "set tracking at the top level of a sweep file, not in base"))
            return []
        try:
            TrialConfig.from_dict(self.base)
        except ConfigError as err:  # reported now, with the file's other problems
            shown = [i for i in err.issues if not _axis_overrides(i.path, self)]
            out += [i.prefixed("base") for i in shown]
            return [str(i) for i in shown]
        return []

    def _without(self, unusable: set[str]) -> SweepSpec:
        """This spec without the axes named in `unusable` (`grid.PATH`, `zip[i]`) and the
        exclusions that name them, unvalidated: what the cells' check can still expand."""
        if not unusable:
            return self
        grid = {p: v for p, v in self.grid.items() if f"grid.{p}" not in unusable}
        zipped = [g for i, g in enumerate(self.zip) if f"zip[{i}]" not in unusable]
        kept = set(grid) | {p for g in zipped for p in g}
        dropped = (set(self.grid) | {p for g in self.zip for p in g}) - kept
        exclude = [e for e in self.exclude if not set(e) & dropped]
        out = copy.copy(self)  # no __post_init__: the original's problems are being reported
        for name, value in (("grid", grid), ("zip", zipped), ("exclude", exclude)):
            object.__setattr__(out, name, value)
        return out

    def _ladder_problems(self) -> list[Issue]:
        """A ladder that cannot be trained from this base (reported with the base's own problems otherwise)."""
        if self.ladder is None:
            return []
        try:
            base = TrialConfig.from_dict(self.base)
        except ConfigError:
            return []  # the base's problems are reported already
        try:
            self.rung_plans(base)
        except ConfigError as err:
            return err.issues
        return []

    def rung_plans(self, base: TrialConfig | None = None) -> list:
        """The ladder's rungs resolved against the base (`orchestrator.ladder.plan.plan_rungs`); [] without a ladder."""
        if self.ladder is None:
            return []
        base = base or TrialConfig.from_dict(self.base)
        return plan_rungs(self.ladder, base.model, base.train, base.data, self.resources.workers_per_trial)


def _overlapping_axes(axes: dict[str, str]) -> list[Issue]:
    """An axis inside another (model.gate and model.gate.position) would set one field twice."""
    out = []
    for path, where in axes.items():
        parts = path.split(".")
        for n in range(1, len(parts)):
            outer = ".".join(parts[:n])
            if outer in axes:
                out.append(Issue(where, f"lies inside the axis {outer} ({axes[outer]}); vary one or the other"))
    return out


def _exclude_value_problems(spec: SweepSpec) -> list[Issue]:
    """An exclude value that no cell has excludes nothing: most likely a typo."""
    values: dict[str, list[Any]] = dict(spec.grid)
    if spec.ladder is not None:
        values[RUNG_AXIS] = rung_names(spec.ladder)
    for group in spec.zip:
        values.update(group)
    out = []
    for e, entry in enumerate(spec.exclude):
        for path, value in entry.items():
            if path in values and value not in values[path]:
                out.append(Issue(f"exclude[{e}].{path}", f"got {show(value)}; not a value of the axis ({show(values[path])})"))
    return out


def _leaf_type(path: str) -> Any:
    """The declared type of the field a valid dotted path names."""
    parts = path.split(".")
    tp: Any = SECTIONS[parts[0]]
    for part in parts[1:]:
        if tp is dict or not hasattr(tp, "__dataclass_fields__"):
            return Any
        tp = field_type(tp, part)
    return tp


def _space_problems(spec: SweepSpec) -> list[Issue]:
    """Every value an Optuna dimension can sample (its bounds, each choice) must be valid for the
    field it sets: the base with that value is validated, and what it adds to the base's own
    problems is reported (so an invalid gate in a `choice` or a negative lr range speaks now)."""
    space = spec.search.space
    if not space or not isinstance(spec.base, dict):
        return []
    base_issues = {str(i) for i in _trial_issues(spec.base)}
    out = []
    for path, dist in space.items():
        if _path_problems(path) or _distribution_problems(dist):
            continue
        kind, args = next(iter(dist.items()))
        if _leaf_type(path) is int and kind in ("uniform", "loguniform"):
            out.append(Issue(f"search.space.{path}", f"{path} is an integer field; use {{int: [low, high]}}, not {kind}"))
            continue
        if kind == "choice":
            probes = args[:MAX_PROBES]
        else:
            lo, hi = cast("tuple[float, float]", numeric_bounds(args))  # not None: _distribution_problems passed
            probes = [int(lo), int(hi)] if kind == "int" else [lo, hi]
        for value in probes:
            data = copy.deepcopy(spec.base)
            try:
                set_dotted(data, path, value)
            except ConfigError:
                continue  # the base has a value where the path needs a section: reported with the base
            for issue in _trial_issues(data):
                if str(issue) not in base_issues:
                    out.append(Issue(f"search.space.{path}", f"{kind} value {show(value)} is not valid: {issue}"))
    return out


def _trial_issues(data: dict) -> list[Issue]:
    try:
        TrialConfig.from_dict(data)
    except ConfigError as err:
        return err.issues
    return []


def _axis_overrides(issue_path: str, spec: SweepSpec) -> bool:
    """Whether a problem of the base is at a path some axis sets (the cells decide then)."""
    axes = list(spec.grid) + [p for g in spec.zip for p in g] + list(spec.search.space)
    return any(issue_path == a or issue_path.startswith(a + ".") or a.startswith(issue_path + ".") for a in axes)


def _path_problems(path: str) -> list[Issue]:
    """A dotted path must name a field of the trial config."""
    parts = path.split(".")
    if len(parts) < 2 or parts[0] not in SECTIONS:
        return [Issue("", f"must be a dotted path into one of {', '.join(SECTIONS)} (e.g. model.gate.position)")]
    cls: Any = SECTIONS[parts[0]]
    for i, part in enumerate(parts[1:], 1):
        if cls is dict:
            return []
        fields = getattr(cls, "__dataclass_fields__", None)
        if fields is None:
            return [Issue("", f"{'.'.join(parts[:i])} is a value, not a section")]
        if part not in fields:
            hint = did_you_mean(part, list(fields))
            return [Issue("", f"unknown field {part!r} in {'.'.join(parts[:i])}{hint}; allowed: {', '.join(fields)}")]
        cls = field_type(cls, part)
    return []


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
    from orchestrator.spec.files import load_yaml

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
        "eval": {"batches": 1, "batch_size": 4, "probe_sequences": 4},
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
