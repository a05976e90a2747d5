"""`gatesweep validate FILE...`: strict loading of sweep (or trial) files. Every unknown key, wrong
type, invalid value and impossible combination is reported at once, with the file, the dotted
path, what was given and what is allowed: also numbers out of range (NaN, infinities, integers
beyond their field), scheduler and search settings Ray Tune would reject, Optuna values outside
their field, local paths that do not exist (relative to the file's folder), and files no YAML
reader should build (too large, too deep, alias bombs, binary). Nothing is launched or written,
no service is contacted. Exit 0 when all are valid, 2 when not."""

from __future__ import annotations

import argparse
import sys

from orchestrator.core.errors import UserError

from .commands import COMMAND_TABLE
from .common import load_yaml
from .sweepfile import add_override_options, is_sweep_file, load_and_expand, overrides_of
from .train import load_trial_config


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("validate", help=COMMAND_TABLE["validate"].help, description=__doc__)
    p.add_argument("files", nargs="+", help="sweep files (or trial config files)")
    add_override_options(p)
    return p


def run(args) -> int:
    overrides = overrides_of(args)
    bad = 0
    for path in args.files:
        try:
            data = load_yaml(path)
            if is_sweep_file(data):
                spec, e = load_and_expand(path, overrides=overrides)
                shown = f"{path} with {overrides.describe()}" if overrides else path
                print(
                    f"{shown}: valid sweep {spec.name!r}: {len(e.trials)} trials "
                    f"({e.cells} cells, {e.excluded} excluded, {e.duplicates} duplicates dropped)"
                )
            elif overrides.grids:
                raise UserError(f"{path}: a trial config takes no --grid (it is one trial); --set works")
            else:
                cfg = load_trial_config(path, [t.split(" ", 1)[1] for t in overrides.texts])
                print(f"{path}: valid trial config (hash {cfg.config_hash()})")
        except UserError as err:
            print(f"gatesweep: error: {err}", file=sys.stderr)
            bad += 1
    return 2 if bad else 0
