"""Entry point: `gatesweep COMMAND ...`.

Exit codes scripts can rely on: 0 success; 1 a trial or sweep failed; 2 a user error (bad file,
bad flag, bad value: one message, no traceback, nothing launched) or a tracking store that
cannot be used (unreachable, refusing, no such run); 130 interrupted; 141 the output was closed
(`gatesweep plan FILE | head -1`: the reader stopped reading, so nothing more is said).

The contract holds for every command of `COMMANDS` in one place, here: a `UserError` or
`ConfigError`, Ctrl-C, a closed stdout, and an error of the tracking store (MLflow's, its HTTP
client's, its database's) end in one line on stderr and that exit status, never a traceback. A
command resolves its store through `common.tracking_uri`, which checks that a remote one answers
before the command starts (MLflow itself retries a dead server for about half a minute).
"""

from __future__ import annotations

import argparse
import os
import select
import sys
from collections.abc import Iterable, Iterator, Mapping
from importlib import import_module
from types import ModuleType

from gatedmodels.typedconfig import ConfigError
from orchestrator.core.errors import UserError

from .. import __version__
from ..tracking.failures import store_failure
from .commands import COMMAND_TABLE


class _Commands(Mapping[str, ModuleType]):
    """Command name -> its module (`add_parser(subparsers)`, `run(args) -> int`), imported when
    first asked for: the one place the CLI imports by name (`commands.COMMAND_TABLE`), so that a
    command loads only its own modules (`tests/test_imports.py` keeps `--help` and `validate` light)."""

    def __getitem__(self, name: str) -> ModuleType:
        return import_module(f"{__package__}.{COMMAND_TABLE[name].module}")

    def __iter__(self) -> Iterator[str]:
        return iter(COMMAND_TABLE)

    def __len__(self) -> int:
        return len(COMMAND_TABLE)


COMMANDS: Mapping[str, ModuleType] = _Commands()
"""The command table: name -> module with `add_parser(subparsers)` and `run(args) -> int`."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's usage errors exit 2 too, with one line
        self.print_usage(sys.stderr)
        print(f"gatesweep: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def build_parser(full: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The parser of every command; with `full`, only those commands' parsers are built (their
    modules imported), the others are their name and help line (enough for `gatesweep --help`
    and for an unknown command's error)."""
    built = set(COMMAND_TABLE) if full is None else set(full)
    parser = _Parser(prog="gatesweep", description="Ablation sweeps of gated attention on Ray + DeepSpeed, tracked in MLflow.")
    parser.add_argument("--version", action="version", version=f"gatesweep {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, command in COMMAND_TABLE.items():
        if name not in built:
            sub.add_parser(name, help=command.help)
            continue
        module = COMMANDS[name]
        p = module.add_parser(sub)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    named = next((a for a in argv if not a.startswith("-")), None)  # the top level's options take no value
    parser = build_parser(full=[named] if named in COMMAND_TABLE else [])
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        code = int(args._run(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, inside the contract, not at the interpreter's exit
        return code
    except (UserError, ConfigError) as err:
        return _fail(str(err), 2)
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    except BrokenPipeError:
        if not stdout_closed():
            raise  # another pipe broke (a child's): not the reader going away
        return closed_output()
    except Exception as err:
        reason = store_failure(err)
        if reason is None:
            raise  # a bug: its traceback is what a report of it needs
        return _fail(reason, 2)


EXIT_CLOSED_OUTPUT = 141
"""128 + SIGPIPE: what a shell reports for a program stopped by a closed pipe."""


def _fail(message: str, code: int) -> int:
    try:
        print(f"gatesweep: error: {message}" if code != 130 else f"gatesweep: {message}", file=sys.stderr, flush=True)
    except (BrokenPipeError, ValueError):  # stderr closed too: the exit status is all there is
        pass
    return code


def closed_output() -> int:
    """The reader of stdout went away (`| head -1`): stop quietly, as `cat` or `grep` do."""
    _quiet_stdout()
    return EXIT_CLOSED_OUTPUT


def stdout_closed() -> bool:
    """Whether stdout is a pipe (or socket) whose reader has gone: poll reports an error on it."""
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no real stdout: the write that failed was to it
        return True


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush has nowhere to fail."""
    try:
        sys.stdout.flush()
    except (BrokenPipeError, ValueError, OSError):
        pass
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no real stdout (an embedding, a test's capture)
        pass


if __name__ == "__main__":
    sys.exit(main())
