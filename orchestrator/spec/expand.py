"""Expansion of a sweep into validated, named trials: the cartesian product of the grid and zip groups,
exclusions, gate normalisation, one validation per distinct section, duplicates dropped by config hash."""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gatedmodels import GateConfig
from gatedmodels.typedconfig import Config, ConfigError, Issue, set_dotted, show
from orchestrator.core.printable import terminal
from orchestrator.ladder.plan import RungPlan, compute_matched, expected_vocab, scale_model, scale_train
from orchestrator.ladder.runs import RUNG_AXIS
from orchestrator.spec.arms import ladder_problems
from orchestrator.spec.reported import REPORTED_METRICS, _reports
from orchestrator.spec.search import numeric_bounds
from orchestrator.spec.trial import SECTIONS, TrialConfig

if TYPE_CHECKING:
    from orchestrator.spec.sweep import SweepSpec  # the sweep's checks call `cell_problems`: sweep imports this module


# ---- expansion -------------------------------------------------------------------------
@dataclass
class ExpandedTrial:
    config: TrialConfig
    config_hash: str
    axes: dict[str, Any]
    """The values of the varying axes for this trial (normalised)."""
    name: str = ""
    rung: RungPlan | None = None
    """The ladder rung this trial trains at (sweeps with a `ladder`)."""
    arm: TrialConfig | None = None
    """A ladder trial's config at the base width, before its rung scaled it: what its arm's
    axes read (an arm's `model.ffn_dim` is its width at the base model's d_model)."""

    @property
    def axis_config(self) -> TrialConfig:
        return self.arm or self.config


@dataclass
class Expansion:
    trials: list[ExpandedTrial]
    cells: int
    excluded: int
    duplicates: int
    varying: list[str]
    """Axes whose value differs between trials (the columns of the trial table)."""
    rungs: list[RungPlan] = field(default_factory=list)
    """The ladder's rungs, smallest first (empty without a ladder)."""


def _cells(spec: SweepSpec, rungs: list[RungPlan]) -> list[dict[str, Any]]:
    dims: list[list[dict[str, Any]]] = [[{path: v} for v in values] for path, values in spec.grid.items()]
    if rungs:
        dims.insert(0, [{RUNG_AXIS: r.name} for r in rungs])
    for group in spec.zip:
        n = len(next(iter(group.values())))
        dims.append([{path: values[i] for path, values in group.items()} for i in range(n)])
    out = []
    for combo in itertools.product(*dims) if dims else [()]:
        cell: dict[str, Any] = {}
        for part in combo:
            cell.update(part)
        out.append(cell)
    return out


def _matches(cell: dict, entry: dict) -> bool:
    return all(path in cell and cell[path] == value for path, value in entry.items())


def expand(spec: SweepSpec, *, source: str | Path | None = None) -> Expansion:
    """Expand and validate every cell; raise ConfigError (naming the cells) if any is invalid.

    Each section (model, data, ...) of a cell depends only on the cell's axes inside that
    section, so sections are built and validated once per distinct combination: a 10,000-cell
    grid validates a handful of sections, not 10,000 trial configs from scratch."""
    expansion, issues = _expand(spec)
    if issues:
        raise ConfigError(issues, str(source) if source else None)
    return expansion


def cell_problems(spec: SweepSpec, known: Collection[str] = ()) -> list[Issue]:
    """What `expand` would raise: the problems of the sweep's cells, each once, and the launch
    checks (`_launch_problems`) over the valid cells, except the problems whose text (`path:
    message`, before the cell is named) is in `known`, the base's own. `SweepSpec.problems` calls
    it, so a file's base, grid, zip, search and scheduler problems are reported in one round."""
    return _expand(spec, set(known))[1]


def _expand(spec: SweepSpec, known: set[str] | None = None) -> tuple[Expansion, list[Issue]]:
    checked = _check_cells(spec, known)
    trials = checked.trials
    varying = _varying_axes(spec, trials)
    for t in trials:
        t.axes = {path: t.rung.name if path == RUNG_AXIS and t.rung else _axis_value(t.axis_config, path) for path in varying}
    zipped = {p for group in spec.zip for p in group}
    _name_trials(trials, varying, zipped | ({"model.gate"} if any(p.startswith("model.gate") for p in zipped) else set()))
    issues = checked.issues + _launch_problems(spec, trials) + ladder_problems(spec, trials, varying)
    return Expansion(trials, checked.cells, checked.excluded, checked.duplicates, varying, checked.rungs), issues


@dataclass
class _Checked:
    trials: list[ExpandedTrial]
    """The valid cells, duplicates dropped (not yet named)."""
    issues: list[Issue]
    cells: int
    excluded: int
    duplicates: int
    rungs: list[RungPlan] = field(default_factory=list)


def _rungs(spec: SweepSpec) -> list[RungPlan] | None:
    """The ladder's rungs ([] without one), or None when they cannot be planned (the ladder's
    problems are `SweepSpec.problems`' to report)."""
    if spec.ladder is None:
        return []
    try:
        return spec.rung_plans()
    except ConfigError:
        return None


def _check_cells(spec: SweepSpec, known: set[str] | None = None) -> _Checked:
    """Build and validate every cell that is not excluded (sections cached per distinct
    combination of their axes' values); each problem once, with the first cell that has it."""
    rungs = _rungs(spec)
    if rungs is None:
        return _Checked([], [], 0, 0, 0)
    by_rung = {r.name: r for r in rungs}
    cells = _cells(spec, rungs)  # SweepSpec bounds their number (MAX_CELLS)
    by_section: dict[str, list[str]] = {name: [] for name in SECTIONS}
    for path in list(spec.grid) + [p for group in spec.zip for p in group]:
        by_section[path.split(".")[0]].append(path)
    base_model = None
    if rungs:  # a rung sets the model's shape and the training budget
        by_section["model"].append(RUNG_AXIS)
        by_section["train"].append(RUNG_AXIS)
        base_model = TrialConfig.from_dict(spec.base).model
    cache: dict[tuple, Any] = {}
    trials: list[ExpandedTrial] = []
    seen: set[str] = set()
    excluded = duplicates = 0
    issues: list[Issue] = []
    reported: set[str] = set(known or ())
    for cell in cells:
        if any(_matches(cell, entry) for entry in spec.exclude):
            excluded += 1
            continue
        sections: dict[str, Any] = {}  # section name -> its config, as TrialConfig's keyword arguments
        errors: list[Issue] = []
        rung = by_rung.get(cell.get(RUNG_AXIS, ""))
        arm: dict[str, Any] = {}  # a ladder trial's sections at the base width: its arm's axis values
        for name, paths in by_section.items():
            arm_key = (name, repr([(p, cell[p]) for p in paths if p in cell and p != RUNG_AXIS]))
            if arm_key not in cache:
                cache[arm_key] = _build_section(name, spec.base.get(name, {}), {p: cell[p] for p in paths if p in cell and p != RUNG_AXIS})
            hit = arm[name] = cache[arm_key]
            if rung is not None and not isinstance(hit, ConfigError):
                key = (name, arm_key[1], rung.name)
                if key not in cache:
                    cache[key] = _at_rung(name, hit, rung, base_model)
                hit = cache[key]
            if isinstance(hit, ConfigError):
                errors += hit.issues
            else:
                sections[name] = hit
        if not errors and rung is not None and spec.ladder is not None and spec.ladder.budget == "compute":
            model = sections["model"].replace(vocab_size=expected_vocab(sections["data"]) or sections["model"].vocab_size)
            sections["train"] = compute_matched(sections["train"], model, rung, spec.ladder, sections["data"].seq_len)
        if not errors:
            try:
                cfg = TrialConfig(**sections, tracking=spec.tracking)
            except ConfigError as err:
                errors = err.issues
        if errors:
            where = "cell {" + ", ".join(f"{k}: {v}" for k, v in cell.items()) + "}" if cell else "base"
            for issue in errors:
                if str(issue) not in reported:
                    reported.add(str(issue))
                    issues.append(Issue(issue.path, f"{issue.message} (in {where})"))
            continue
        h = cfg.config_hash()
        if h in seen:
            duplicates += 1
            continue
        seen.add(h)
        trials.append(ExpandedTrial(cfg, h, {}, rung=rung, arm=TrialConfig(**arm, tracking=spec.tracking) if rung else None))
    return _Checked(trials, issues, len(cells), excluded, duplicates, rungs)


def _launch_problems(spec: SweepSpec, trials: list[ExpandedTrial]) -> list[Issue]:
    """What Ray Tune would reject only once the sweep's runs are written: the scheduler's steps
    against the trials' and a scheduler or search metric that some trial does not report."""
    if not trials:
        return []
    out = []
    sched = spec.scheduler
    if sched is not None and sched.type == "asha":
        steps: list[tuple[float, ExpandedTrial | None]] = [(t.config.train.steps, t) for t in trials]
        dist = spec.search.space.get("train.steps") if spec.search.type == "optuna" else None
        shortest, first = min(steps, key=lambda st: st[0])
        if dist is not None:  # Optuna may sample shorter trials
            low = min(_space_values(dist))
            if low < shortest:
                shortest, first = low, None
        where = f"trial {first.name}" if first is not None else "the search space's train.steps"
        if sched.grace_period > shortest:
            out.append(
                Issue(
                    "scheduler.grace_period", f"got {sched.grace_period}; allowed: <= train.steps of every trial ({int(shortest)}, {where})"
                )
            )
        lone = next((t for t in trials if not 0 < t.config.train.eval_every < t.config.train.steps), None)
        if lone is not None:
            out.append(
                Issue(
                    "scheduler",
                    f"ASHA stops trials at their evaluations, but trial {lone.name} evaluates only at its "
                    f"end (train.eval_every {lone.config.train.eval_every}, train.steps "
                    f"{lone.config.train.steps}); set train.eval_every below train.steps, or drop the scheduler",
                )
            )
        out += _metric_problems("scheduler.metric", sched.metric, trials, at_every_evaluation=True)
    if spec.search.type == "optuna":
        out += _metric_problems("search.metric", spec.search.metric, trials, at_every_evaluation=False)
    return out


def _space_values(dist: dict) -> list[float]:
    kind, args = next(iter(dist.items()))
    values = args if kind == "choice" else list(numeric_bounds(args) or ())
    return [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)] or [math.inf]


def _metric_problems(where: str, metric: str, trials: list[ExpandedTrial], *, at_every_evaluation: bool) -> list[Issue]:
    for t in trials:
        reason = _reports(t.config, metric, at_every_evaluation=at_every_evaluation)
        if reason:
            return [
                Issue(
                    where,
                    f"got {show(metric)}, which trial {t.name} does not report ({reason}); every trial "
                    f"reports {', '.join(REPORTED_METRICS)}",
                )
            ]
    return []


def _build_section(name: str, base: Any, values: dict[str, Any]) -> Config | ConfigError:
    """One validated section (or the ConfigError saying why not)."""
    data = copy.deepcopy(base) if isinstance(base, dict) else base
    try:
        if values and not isinstance(data, dict):
            raise ConfigError([Issue(name, f"got {show(base)}; expected a mapping")])
        for path, value in values.items():
            set_dotted(data, path.split(".", 1)[1], value)
        if name == "model" and isinstance(data, dict) and isinstance(data.get("gate"), dict):
            data["gate"] = GateConfig.normalize_dict(data["gate"])
        return SECTIONS[name].from_dict(data, path=name)
    except ConfigError as err:
        return err


def _at_rung(section: str, config: Any, rung: RungPlan, base_model: Any) -> Any:
    """An arm's model or train section at a ladder rung (other sections as they are)."""
    try:
        if section == "model":
            return scale_model(config, rung, base_model)
        if section == "train":
            return scale_train(config, rung)
    except ConfigError as err:
        return err.with_prefix(section)
    return config


def _axis_value(cfg: TrialConfig, path: str) -> Any:
    if path == "model.gate":
        return cfg.model.gate.label
    node: Any = cfg
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else getattr(node, part, None)
    return node


def _varying_axes(spec: SweepSpec, trials: list[ExpandedTrial]) -> list[str]:
    """Axis paths whose (normalised) values differ between trials; gate fields fold into one `model.gate` column."""
    paths = list(spec.grid) + [p for group in spec.zip for p in group]
    out: list[str] = [RUNG_AXIS] if len({t.rung.name for t in trials if t.rung}) > 1 else []
    gate_varies = False
    for path in paths:
        if path.startswith("model.gate"):
            gate_varies = gate_varies or len({t.config.model.gate.label for t in trials}) > 1
            continue
        if len({repr(_axis_value(t.axis_config, path)) for t in trials}) > 1:
            out.append(path)
    return (["model.gate"] if gate_varies else []) + out


def _short(path: str, value: Any) -> str:
    if path == "model.gate":
        return str(value)
    if path in ("model.size", RUNG_AXIS):
        return str(value)
    if path == "train.seed":
        return f"s{value}"
    leaf = path.split(".")[-1]
    if isinstance(value, float):
        value = f"{value:g}"
    return f"{leaf}={value}"


def _name_trials(trials: list[ExpandedTrial], varying: list[str], zipped: Collection[str] = frozenset()) -> None:
    """Run names from the values that vary (e.g. `G1-elementwise-small-s0`), unique. A zipped
    axis names only its departures from its most common value (`none-n_heads=48`, not
    `none-n_kv_heads=4-n_heads=48-n_experts=128`)."""
    from collections import Counter

    usual = {}
    for p in varying:
        if p in zipped and p != "model.gate":  # the gate arm is always named
            (value, n), *rest = Counter(repr(t.axes[p]) for t in trials).most_common()
            if not rest or n > rest[0][1]:
                usual[p] = value
    counts: dict[str, int] = {}
    for t in trials:
        parts = [_short(p, t.axes[p]) for p in varying if usual.get(p) != repr(t.axes[p])]
        name = terminal("-".join(parts) or t.config.model.gate.label)  # values may hold ESC, U+202E, newlines
        t.name = name
        counts[name] = counts.get(name, 0) + 1
    for t in trials:
        if counts[t.name] > 1:
            t.name = f"{t.name}-{t.config_hash[:6]}"
