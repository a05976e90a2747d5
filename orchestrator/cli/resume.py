"""`gatesweep resume NAME|FILE`: continue a sweep whose driver died or was interrupted.

Same MLflow parent run; finished trials are not rerun; interrupted ones continue from their last
checkpoint in their own MLflow runs. Ray processes left behind by a killed driver are stopped.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gatedmodels.typedconfig import flatten_dict
from orchestrator.core.errors import UserError
from orchestrator.launch.preflight_storage import runs_location
from orchestrator.launch.state import load_state, sweep_dir
from orchestrator.spec.sweep import NAME_RE
from orchestrator.storage.retry import retried
from orchestrator.storage.scratch import scratch_root

from .commands import COMMAND_TABLE
from .run import add_launch_options, launch
from .sweepfile import load_and_expand


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "resume", help=COMMAND_TABLE["resume"].help, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("sweep", help="sweep name (as in its file) or the sweep file")
    p.add_argument(
        "--force",
        action="store_true",
        help="adopt an edited sweep file (only when the edit keeps every launched trial as it was: "
        "added cells, resources, retries, description)",
    )
    add_launch_options(p)
    return p


def run(args) -> int:
    target = Path(args.sweep)
    given = target if target.is_file() else None
    if given is not None:
        spec, _ = load_and_expand(given)
        name = spec.name
    else:
        name = args.sweep
        if not NAME_RE.fullmatch(name):  # a name, never a path out of the runs folder
            raise UserError(f"{name!r}: not a sweep file nor a sweep name (1-100 letters, digits, '.', '_', '-')")
    state_dir = sweep_dir(runs_location(args.runs_dir), name)
    state = load_state(state_dir)
    if not state:
        where = str(state_dir).rsplit("/", 1)[0]
        raise UserError(f"no sweep named {name!r} in {where} (was it launched with another --runs-dir?)")
    stored = stored_copy(state_dir, state) if state_dir.local is None else state_dir.local / "sweep.yaml"  # never a path the state names
    if not stored.is_file() and given is None:
        raise UserError(f"{stored}: the stored copy of sweep {name!r} is missing; resume with the sweep file instead")
    stored_spec, stored_exp = load_and_expand(stored) if stored.is_file() else (None, None)
    if given is not None and stored_spec is not None:
        spec, expansion = load_and_expand(given)
        changes = spec_changes(stored_spec, spec)
        if changes and not args.force:
            raise UserError(
                f"{given} differs from the copy sweep {name!r} was launched with ({stored}): {changes}; "
                "pass --force to adopt the edit, or `gatesweep resume NAME` to continue as launched"
            )
        if changes:
            lost = {t.config_hash for t in stored_exp.trials} - {t.config_hash for t in expansion.trials}
            if lost:
                example = next(t.name for t in stored_exp.trials if t.config_hash in lost)
                raise UserError(
                    f"{given}: the edit changes or removes {len(lost)} launched trial(s) (e.g. {example}), so their "
                    "results would no longer belong to this sweep; launch it as a new sweep (another `name`)"
                )
            print(f"adopting the edited sweep file ({changes})", flush=True)
        source = given
    elif given is not None:
        spec, expansion, source = *load_and_expand(given), given
    else:
        spec, expansion, source = stored_spec, stored_exp, stored
        origin = Path(state["source"]) if isinstance(state.get("source"), str) else None
        if origin is not None and origin.is_file() and origin.resolve() != stored.resolve():
            try:
                changes = spec_changes(stored_spec, load_and_expand(origin)[0])
            except UserError:
                changes = "it no longer validates"
            if changes:
                print(
                    f"note: {origin} changed since launch ({changes}); continuing with the stored copy "
                    f"(`gatesweep resume {origin} --force` adopts the edit)",
                    flush=True,
                )
    if spec.name != name:
        raise UserError(f"{target}: the file defines sweep {spec.name!r}, not {name!r}")
    return launch(spec, expansion, source, args, resume=True, rerun=False)


def stored_copy(state_dir, state: dict) -> Path:
    """A remote sweep's stored sweep file (and its state.json, which names the launched file, for
    `relative_to`), downloaded into this machine's scratch folder; the local path of the copy."""
    local = scratch_root() / "sweeps" / state_dir.name / "stored"
    local.mkdir(parents=True, exist_ok=True)
    for f in ("sweep.yaml", "state.json"):
        (local / f).unlink(missing_ok=True)  # a copy of an earlier resume is not trusted
        try:
            retried(lambda f=f: state_dir.child(f).download(local / f), f"reading {state_dir / f}", budget_s=60)
        except FileNotFoundError:
            pass
        except OSError as err:
            raise UserError(f"{state_dir / f}: cannot be read ({str(err).strip()[:200]})") from None
    return local / "sweep.yaml"


def spec_changes(old, new, limit: int = 4) -> str:
    """The dotted fields whose values differ between two sweep specs, e.g. 'train.steps: 100 -> 200'."""
    a, b = flatten_dict(old.to_dict()), flatten_dict(new.to_dict())
    diffs = [f"{k}: {a.get(k, '(unset)')!r} -> {b.get(k, '(unset)')!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    more = f" and {len(diffs) - limit} more" if len(diffs) > limit else ""
    return "; ".join(diffs[:limit]) + more
