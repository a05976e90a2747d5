"""`gatesweep schema [--trial]`: print the JSON Schema of sweep files (or of trial configs)."""

from __future__ import annotations

import argparse
import json

from orchestrator.spec.schema import sweep_schema, trial_schema

from .commands import COMMAND_TABLE


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("schema", help=COMMAND_TABLE["schema"].help, description=__doc__)
    p.add_argument("--trial", action="store_true", help="the schema of trial configs (gatesweep train) instead")
    return p


def run(args) -> int:
    print(json.dumps(trial_schema() if args.trial else sweep_schema(), indent=2))
    return 0
