"""Command-line overrides of a sweep file: `--set KEY=VALUE` and `--grid KEY=V1,V2` for `run`,
`validate` and `plan` (Hydra's `-m model.gate=none,G1 seed=0,1`, without copying the file).

- `--set KEY=VALUE` sets one value. A key inside a trial section (`train.steps`, `model.size`)
  is a base field; when the file grids that key, the axis is pinned to the one value (a
  cut-down run: `--set train.seed=0`). A key of the sweep itself (`name`, `resources.*`,
  `tracking.*`, `retries`, `search.*`, `scheduler.*`) sets that.
- `--grid KEY=V1,V2` makes the key an axis with those values (replacing the file's values, or the
  base's one value). Values are read as YAML (`0,1,2` are numbers, `none,G1` text,
  `[0.9,0.95],[0.9,0.99]` two lists).

Every `--set` applies before every `--grid`. Keys in a `zip` group are refused: the group's values go together, so one of them cannot be
changed alone (edit the file). An `exclude` entry that names a value the override removed can
match no cell any more and is dropped. Local paths among the values are made absolute against
the working directory (where the command was typed). The result is validated like the file (it
*is* the file, changed), and what a launch keeps (the stored sweep file, the copy on the parent
run) is the changed file, so `resume` and the report see the same sweep (`effective_text`).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gatedmodels.typedconfig import ConfigError, Issue, did_you_mean, set_dotted, show
from orchestrator.spec.paths import resolve_value
from orchestrator.spec.trial import parse_override

SECTION_KEYS = ("model", "data", "train", "deepspeed", "eval")
"""First parts of a key that name a trial section (a base field or an axis)."""
SWEEP_KEYS = ("name", "description", "retries", "search", "scheduler", "resources", "tracking", "ladder")
"""First parts of a key that name a field of the sweep itself."""


@dataclass(frozen=True)
class Overrides:
    """The `--set` and `--grid` overrides of one command line, in the order given."""

    sets: tuple[tuple[str, Any], ...] = ()
    grids: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    texts: tuple[str, ...] = ()
    """As typed (`--set train.steps=100`), for messages and the stored file's header."""

    def __bool__(self) -> bool:
        return bool(self.sets or self.grids)

    def describe(self) -> str:
        """`--set train.steps=100 --grid train.seed=0,1`."""
        return " ".join(self.texts)

    def apply(self, data: dict, folder: str | Path) -> dict:
        """A copy of a raw sweep file's dict with the overrides applied (local paths among the
        values made absolute against `folder`); ConfigError for a key that cannot take one."""
        out = copy.deepcopy(data) if isinstance(data, dict) else {}
        for key, value in self.sets:
            _set(out, key, resolve_value(key, value, folder) if key.split(".")[0] in SECTION_KEYS else value)
        for key, values in self.grids:
            _grid(out, key, [resolve_value(key, v, folder) for v in values])
        return out


def parse_overrides(sets: Sequence[str] = (), grids: Sequence[str] = ()) -> Overrides:
    """The overrides of `--set KEY=VALUE` and `--grid KEY=V1,V2` arguments; ConfigError naming the
    flag for one that is not KEY=VALUE or whose key names nothing a sweep file has."""
    parsed_sets, parsed_grids, texts, issues = [], [], [], []
    for text in sets:
        try:
            key, value = parse_override(text)
        except ConfigError as err:
            issues += err.issues
            continue
        problem = _key_problem(key)
        if problem:
            issues.append(Issue(f"--set {key}", problem))
        parsed_sets.append((key, value))
        texts.append(f"--set {text}")
    for text in grids:
        key, _, raw = text.partition("=")
        key = key.strip()
        values = _values(raw)
        if not key or "=" not in text or not values:
            issues.append(Issue("--grid", f"got {show(text)}; expected KEY=V1,V2,..., e.g. train.seed=0,1,2"))
            continue
        problem = _key_problem(key, axis=True)
        if problem:
            issues.append(Issue(f"--grid {key}", problem))
        parsed_grids.append((key, tuple(values)))
        texts.append(f"--grid {text}")
    if issues:
        raise ConfigError(issues)
    return Overrides(tuple(parsed_sets), tuple(parsed_grids), tuple(texts))


def _key_problem(key: str, *, axis: bool = False) -> str | None:
    head = key.split(".")[0]
    allowed = SECTION_KEYS if axis else SECTION_KEYS + SWEEP_KEYS
    if head in allowed and (axis or head in SWEEP_KEYS or "." in key):
        return None
    what = "a dotted path into a trial section" if axis else "a dotted path into a trial section or a field of the sweep"
    return f"{what} ({', '.join(allowed)}); got {show(key)}{did_you_mean(head, list(allowed))}"


def _values(raw: str) -> list[Any]:
    """`0,1,2` -> [0, 1, 2]; `none,G1` -> ["none", "G1"]; `[0.9,0.95],[0.9,0.99]` -> two lists."""
    if not raw.strip():
        return []
    try:
        values = yaml.safe_load(f"[{raw}]")
    except yaml.YAMLError:
        return [v.strip() for v in raw.split(",")]
    return values if isinstance(values, list) else [values]


def _zip_group(data: dict, key: str) -> list[str] | None:
    for group in data.get("zip") or []:
        if isinstance(group, dict) and key in group:
            return list(group)
    return None


def _refuse_zipped(data: dict, key: str, flag: str) -> None:
    group = _zip_group(data, key)
    if group is not None:
        raise ConfigError(
            [
                Issue(
                    f"{flag} {key}",
                    f"is in a zip group with {', '.join(p for p in group if p != key) or 'nothing else'}; "
                    "its values go together, so change them in the file",
                )
            ]
        )


def _set(data: dict, key: str, value: Any) -> None:
    head = key.split(".")[0]
    if head not in SECTION_KEYS:
        set_dotted(data, key, value)
        return
    _refuse_zipped(data, key, "--set")
    grid = data.get("grid")
    if isinstance(grid, dict) and key in grid:
        grid[key] = [value]  # pinned: the axis keeps its place (and its exclusions their meaning)
        _drop_moot_exclusions(data, key, [value])
        return
    base = data.setdefault("base", {})
    if not isinstance(base, dict):
        raise ConfigError([Issue(f"--set {key}", "the file's base is not a mapping")])
    set_dotted(base, key, value)


def _grid(data: dict, key: str, values: list[Any]) -> None:
    _refuse_zipped(data, key, "--grid")
    grid = data.get("grid")
    if grid is None:
        grid = data["grid"] = {}
    if not isinstance(grid, dict):
        raise ConfigError([Issue(f"--grid {key}", "the file's grid is not a mapping")])
    grid[key] = values
    _drop_moot_exclusions(data, key, values)


def _drop_moot_exclusions(data: dict, key: str, values: list[Any]) -> None:
    """Exclusions naming a value of `key` that is no longer one of its values match no cell."""
    entries = data.get("exclude")
    if isinstance(entries, list):
        data["exclude"] = [e for e in entries if not (isinstance(e, dict) and key in e and e[key] not in values)]


def effective_text(original: str, data: dict, overrides: Overrides, source: str) -> str:
    """The sweep file a launch keeps: the file as written without overrides; with them, the
    changed file (its local paths absolute) under a header that says how it was made."""
    if not overrides:
        return original
    header = f"# {source} with {overrides.describe()} (written by gatesweep; local paths made absolute)\n"
    return header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
