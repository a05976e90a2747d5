"""The CLI's explicit command table: every command's module imports and registers its parser;
a command imports its own module only (`orchestrator/cli/commands.py`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli.commands import COMMAND_TABLE
from orchestrator.cli.main import COMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[2]


def test_every_command_is_in_the_table_and_parses_its_help():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert set(sub.choices) == set(COMMANDS)
    for name, module in COMMANDS.items():
        assert callable(module.add_parser) and callable(module.run), name


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_of_each_command_exits_0(name):
    out = subprocess.run([sys.executable, "-m", "orchestrator.cli", name, "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "usage: gatesweep " + name in out.stdout, out.stderr


def test_the_short_listing_is_the_full_one():
    """`gatesweep --help` is built from the table without importing a command; it lists what the
    full parser lists, each command with the help line its own parser has."""
    assert build_parser(full=[]).format_help() == build_parser().format_help()
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert {c.dest: c.help for c in sub._choices_actions} == {n: c.help for n, c in COMMAND_TABLE.items()}


def test_a_command_imports_its_own_module_only():
    """`gatesweep validate` and `gatesweep schema` in a fresh interpreter: no other command's module is loaded."""
    code = (
        "import contextlib, io, json, sys, orchestrator.cli.main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert sys.modules['orchestrator.cli.main'].main(sys.argv[1:]) == 0\n"
        "print(json.dumps(sorted(m.rsplit('.', 1)[1] for m in sys.modules if m.startswith('orchestrator.cli.'))))"
    )
    for argv, expected in (
        (["validate", "sweeps/hello.yaml"], ["commands", "common", "main", "sweepfile", "train", "validate"]),
        (["schema"], ["commands", "main", "schema"]),
    ):
        out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout) == expected, out.stdout
