"""The CLI's explicit command table: every command's module imports and registers its parser."""

from __future__ import annotations

import subprocess
import sys

import pytest

from orchestrator.cli.main import COMMANDS, build_parser


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
