"""Entry point: `gatesweep SUBCOMMAND ...`. Exit codes: 0 ok, 1 failure, 2 user error, 130 interrupted."""

from __future__ import annotations

import argparse
import sys

from .. import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gatesweep", description="Ablation sweeps of gated attention on Ray + DeepSpeed, tracked in MLflow.")
    parser.add_argument("--version", action="version", version=f"gatesweep {__version__}")
    parser.add_subparsers(dest="command", metavar="COMMAND")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
