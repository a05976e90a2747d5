"""Entry point: `gatesweep COMMAND ...`.

Exit codes scripts can rely on: 0 success; 1 a trial or sweep failed; 2 a user error (bad file,
bad flag, bad value: one message, no traceback, nothing launched); 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys

from gatedmodels.typedconfig import ConfigError

from .. import __version__
from . import data, export, import_, plan, probe, report, resume, run, schema, train, ui, validate
from . import eval as eval_
from .common import UserError

#: the command table: name -> module with `add_parser(subparsers)` and `run(args) -> int`
COMMANDS = {
    "validate": validate,
    "plan": plan,
    "run": run,
    "resume": resume,
    "train": train,
    "eval": eval_,
    "report": report,
    "ui": ui,
    "schema": schema,
    "data": data,
    "export": export,
    "import": import_,
    "probe": probe,
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's usage errors exit 2 too, with one line
        self.print_usage(sys.stderr)
        print(f"gatesweep: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="gatesweep", description="Ablation sweeps of gated attention on Ray + DeepSpeed, tracked in MLflow.")
    parser.add_argument("--version", action="version", version=f"gatesweep {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for module in COMMANDS.values():
        p = module.add_parser(sub)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except UserError as err:
        print(f"gatesweep: error: {err}", file=sys.stderr)
        return 2
    except ConfigError as err:
        print(f"gatesweep: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gatesweep: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
