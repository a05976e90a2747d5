"""The problems of a sweep file, all in one round (`SweepSpec.problems`, with the name's): the
base's own, the axes' (dotted paths into the trial config, zip groups' lengths, axes inside other
axes, a ladder's axis and its promotion baseline, exclusions naming no axis or no value of one),
an Optuna space's (each value it can sample is validated for the field it sets), the number of
cells, and every value of every usable axis in the cells that have it (`spec.expand.cell_problems`),
an axis already reported left out of the cells' check so that every other one is still checked."""

from __future__ import annotations

import copy
import math
from typing import TYPE_CHECKING, Any, cast

from gatedmodels.typedconfig import ConfigError, Issue, did_you_mean, field_type, set_dotted, show
from orchestrator.ladder.plan import axis_problems, rung_names
from orchestrator.ladder.runs import RUNG_AXIS
from orchestrator.spec.expand import cell_problems
from orchestrator.spec.search import _distribution_problems, numeric_bounds
from orchestrator.spec.trial import SECTIONS, TrialConfig

if TYPE_CHECKING:
    from orchestrator.spec.sweep import SweepSpec

MAX_CELLS = 100_000
"""Most cells a sweep's grid and zip groups may expand to (10,000 validate in a third of a second)."""
MAX_PROBES = 200


def sweep_problems(spec: SweepSpec) -> list[Issue]:
    """Every problem of the file but its name's: the base's, the axes' (paths, lengths,
    exclusions), each grid and zip value's in the cells that have it (beyond the base's own
    problems), and each value an Optuna space can sample."""
    out: list[Issue] = []
    base_issues = _base_problems(spec, out)
    axes, unusable = _grid_and_zip(spec, out)
    if spec.ladder is not None:
        out += _ladder_axis_problems(spec, axes)
    for e, entry in enumerate(spec.exclude):
        if not entry:
            out.append(Issue(f"exclude[{e}]", "is empty (it would exclude every cell)"))
        for path in entry:
            if path not in axes:
                out.append(Issue(f"exclude[{e}].{path}", f"is not an axis of grid or zip; axes: {', '.join(axes) or 'none'}"))
    for path, dist in spec.search.space.items():
        out += [i.prefixed(f"search.space.{path}") for i in _path_problems(path)]
        out += [i.prefixed(f"search.space.{path}") for i in _distribution_problems(dist)]
        if path in axes:
            out.append(Issue(f"search.space.{path}", f"is also a grid/zip axis ({axes[path]}); search it or grid it, not both"))
    if spec.search.type == "grid" and spec.search.space:
        out.append(Issue("search.space", "is only used by search type 'optuna'"))
    overlapping = _overlapping_axes({**axes, **{p: f"search.space.{p}" for p in spec.search.space}})
    out += overlapping
    unusable |= {i.path for i in overlapping}
    out += _exclude_value_problems(spec)
    cells = math.prod(len(v) for v in spec.grid.values()) * math.prod(len(next(iter(g.values()), [])) for g in spec.zip)
    cells *= len(spec.ladder.rungs) if spec.ladder is not None else 1
    if cells > MAX_CELLS:
        out.append(Issue("grid", f"expands to {cells:,} cells; allowed: at most {MAX_CELLS:,} (split the sweep into several files)"))
    else:
        # every value of the usable axes is checked even when another axis is broken (all problems at once)
        out += cell_problems(_without(spec, unusable), known=base_issues)
    out += _space_problems(spec)  # it skips the dimensions reported above
    return out


def _grid_and_zip(spec: SweepSpec, out: list[Issue]) -> tuple[dict[str, str], set[str]]:
    """The problems of the grid's and the zip groups' axes (appended to `out`); (every axis ->
    where it is set, the axes left out of the cells' check: `grid.PATH`, `zip[i]`)."""
    axes: dict[str, str] = {}
    unusable: set[str] = set()
    for path, values in spec.grid.items():
        found = [i.prefixed(f"grid.{path}") for i in _path_problems(path)]
        if not values:
            found.append(Issue(f"grid.{path}", "is empty; give at least one value"))
        out += found
        unusable |= {f"grid.{path}"} if found else set()
        axes[path] = f"grid.{path}"
    for g, group in enumerate(spec.zip):
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
    return axes, unusable


def _ladder_axis_problems(spec: SweepSpec, axes: dict[str, str]) -> list[Issue]:
    """A ladder's: the axes it cannot go with, its rungs' own, a promotion baseline naming no
    arm axis. Adds the rung axis to `axes`."""
    assert spec.ladder is not None
    out = axis_problems([(p, w) for p, w in axes.items()] + [(p, f"search.space.{p}") for p in spec.search.space])
    axes[RUNG_AXIS] = "ladder.rungs"
    out += _ladder_problems(spec)
    promote = spec.ladder.promote
    arm_axes = [a for a in axes if a != RUNG_AXIS and a.rsplit(".", 1)[-1] != "seed"]
    for key in promote.baseline if promote is not None else {}:
        inside = any(key.startswith(a + ".") or a.startswith(key + ".") for a in arm_axes)  # model.gate.position, model.gate
        if key not in arm_axes and not inside:
            out.append(
                Issue(f"ladder.promote.baseline.{key}", f"is not an arm axis of this sweep; arm axes: {', '.join(arm_axes) or 'none'}")
            )
    return out


def _base_problems(spec: SweepSpec, out: list[Issue]) -> list[str]:
    """The base's own problems (appended to `out`, prefixed), except those at a path an axis sets;
    their texts, so that the cells' check does not report them again."""
    if "tracking" in spec.base:
        out.append(Issue("base.tracking", "set tracking at the top level of a sweep file, not in base"))
        return []
    try:
        TrialConfig.from_dict(spec.base)
    except ConfigError as err:  # reported now, with the file's other problems
        shown = [i for i in err.issues if not _axis_overrides(i.path, spec)]
        out += [i.prefixed("base") for i in shown]
        return [str(i) for i in shown]
    return []


def _without(spec: SweepSpec, unusable: set[str]) -> SweepSpec:
    """This spec without the axes named in `unusable` (`grid.PATH`, `zip[i]`) and the
    exclusions that name them, unvalidated: what the cells' check can still expand."""
    if not unusable:
        return spec
    grid = {p: v for p, v in spec.grid.items() if f"grid.{p}" not in unusable}
    zipped = [g for i, g in enumerate(spec.zip) if f"zip[{i}]" not in unusable]
    kept = set(grid) | {p for g in zipped for p in g}
    dropped = (set(spec.grid) | {p for g in spec.zip for p in g}) - kept
    exclude = [e for e in spec.exclude if not set(e) & dropped]
    out = copy.copy(spec)  # no __post_init__: the original's problems are being reported
    for name, value in (("grid", grid), ("zip", zipped), ("exclude", exclude)):
        object.__setattr__(out, name, value)
    return out


def _ladder_problems(spec: SweepSpec) -> list[Issue]:
    """A ladder that cannot be trained from this base (reported with the base's own problems otherwise)."""
    if spec.ladder is None:
        return []
    try:
        base = TrialConfig.from_dict(spec.base)
    except ConfigError:
        return []  # the base's problems are reported already
    try:
        spec.rung_plans(base)
    except ConfigError as err:
        return err.issues
    return []


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
