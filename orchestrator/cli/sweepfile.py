"""Loading sweep files for the CLI: strict loading, expansion, one clean error for any problem.

Local paths in the file (data sources, tokenizer files, MMLU folders, perplexity sets) are made
absolute against the file's folder, so every Ray trial finds them whatever its working directory;
what a trial needs from this machine (readable data, the Hub when a source is `hf:`) is checked
for every distinct data and evaluation section before anything is launched.
"""

from __future__ import annotations

import json
from pathlib import Path

from gatedmodels.typedconfig import ConfigError
from orchestrator.core.errors import UserError
from orchestrator.spec.expand import expand
from orchestrator.spec.files import read_text
from orchestrator.spec.overrides import Overrides, effective_text, parse_overrides
from orchestrator.spec.paths import distinct_problems, environment_problems
from orchestrator.spec.sweep import apply_smoke, load_sweep, sweep_data
from orchestrator.tracking import resolve_tracking_uri


def add_override_options(p) -> None:
    """`--set KEY=VALUE` and `--grid KEY=V1,V2` (`orchestrator.spec.overrides`)."""
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one value of the file (repeatable): a base field (train.steps=200), a gridded key pinned to one value "
        "(train.seed=0), or a sweep field (name=mine, resources.max_concurrent=1)",
    )
    p.add_argument(
        "--grid",
        dest="grids",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="make KEY an axis with these values, replacing the file's (repeatable), e.g. --grid model.gate.position=none,G1",
    )


def overrides_of(args):
    """The command line's `--set` / `--grid` overrides (empty for a command without them);
    UserError for one that is not KEY=VALUE or names nothing a sweep file has."""
    sets, grids = getattr(args, "sets", None) or [], getattr(args, "grids", None) or []
    if not sets and not grids:
        return Overrides()
    try:
        return parse_overrides(sets, grids)
    except ConfigError as err:
        raise UserError(err.render()) from None


def load_and_expand(path: str | Path, *, smoke: bool = False, base_dir: str | Path | None = None, overrides=None):
    """(spec, expansion) of a sweep file with the command line's `overrides`, or UserError listing
    every problem with the file name. Relative paths in it are relative to `base_dir`, by default
    `relative_to(path)`."""
    where = f"{path} with {overrides.describe()}" if overrides else str(path)
    try:
        spec = load_sweep(path, base_dir=base_dir if base_dir is not None else relative_to(Path(path)), overrides=overrides)
    except ConfigError as err:
        raise UserError(err.render()) from None
    if smoke:
        spec = apply_smoke(spec)
    try:
        expansion = expand(spec, source=where)
    except ConfigError as err:
        raise UserError(err.with_source(where).render()) from None
    if not expansion.trials:
        raise UserError(f"{where}: the sweep has no trials left ({expansion.cells} cells, {expansion.excluded} excluded)")
    issues = distinct_problems([t.config for t in expansion.trials], environment_problems)
    if issues:
        raise UserError(ConfigError(issues, where).render())
    check_tracking_uri(spec.tracking.uri, where)
    return spec, expansion


def effective_file(path: str | Path, overrides, folder: Path) -> Path:
    """The sweep file a launch keeps and logs: `path` itself without overrides; with them, the
    changed file written into `folder` under the same name (`orchestrator.spec.overrides.effective_text`)."""
    if not overrides:
        return Path(path)
    data = sweep_data(path, base_dir=relative_to(Path(path)), overrides=overrides)
    out = folder / Path(path).name
    out.write_text(effective_text(read_text(path, what="sweep file"), data, overrides, str(path)), encoding="utf-8")
    return out


def check_tracking_uri(uri: str | None, path: str | Path) -> None:
    """The file's `tracking.uri` checked as `plan`, `run` and `train` resolve it (one check for
    every command, `validate` too): a scheme MLflow cannot use, or a SQLite file in a folder that
    does not exist, is refused naming the file and the field. Nothing is contacted."""
    if uri is None:
        return
    try:
        resolve_tracking_uri(uri)
    except ConfigError as err:
        message = err.issues[0].message if err.issues else str(err)
        raise UserError(f"{path}: tracking.uri: {message}") from None


def relative_to(path: Path) -> Path:
    """The folder a sweep file's relative paths are relative to: its own; for the copy a launched
    sweep keeps in its state folder (runs/sweeps/NAME/sweep.yaml beside state.json, which names
    the launched file), the launched file's, so `gatesweep resume NAME` finds the same paths."""
    path = path.expanduser().absolute()
    state = path.parent / "state.json"
    if path.name == "sweep.yaml" and state.is_file():
        try:
            source = json.loads(state.read_text()).get("source")
        except (OSError, ValueError, AttributeError):
            source = None
        if isinstance(source, str) and source:
            return Path(source).expanduser().absolute().parent
    return path.parent


def is_sweep_file(data: dict) -> bool:
    return "name" in data or any(k in data for k in ("base", "grid", "zip", "search"))
