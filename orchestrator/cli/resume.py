"""`gatesweep resume NAME|FILE`: continue a sweep whose driver died or was interrupted.

Same MLflow parent run; finished trials are not rerun; interrupted ones continue from their last
checkpoint in their own MLflow runs. Ray processes left behind by a killed driver are stopped.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .common import UserError


def add_parser(sub) -> argparse.ArgumentParser:
    from .run import add_launch_options

    p = sub.add_parser("resume", help="continue an interrupted sweep", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sweep", help="sweep name (as in its file) or the sweep file")
    add_launch_options(p)
    return p


def run(args) -> int:
    from ..launcher import load_state, sweep_dir
    from .run import launch
    from .sweepfile import load_and_expand

    target = Path(args.sweep)
    if target.is_file():
        spec, _ = load_and_expand(target)
        name = spec.name
    else:
        name = args.sweep
    state_dir = sweep_dir(Path(args.runs_dir), name)
    state = load_state(state_dir)
    if not state:
        raise UserError(f"no sweep named {name!r} in {state_dir.parent} (was it launched with another --runs-dir?)")
    source = Path(state["sweep_file"])
    spec, expansion = load_and_expand(target if target.is_file() else source)
    if spec.name != name:
        raise UserError(f"{target}: the file defines sweep {spec.name!r}, not {name!r}")
    return launch(spec, expansion, source if source.exists() else target, args, resume=True, rerun=False)
