"""One CLI runner: in-process where the test is about what the command does, a subprocess where
the test is about the process (exit by signal, a closed pipe, Ray started and stopped, the
environment a fresh interpreter sees)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import IO, Any, NamedTuple

import pytest

from orchestrator.cli import main

GATESWEEP = [sys.executable, "-m", "orchestrator.cli"]
"""The command line of `gatesweep` in a fresh interpreter (the console script is the same)."""


class CliResult(NamedTuple):
    """An in-process command's exit code and what it printed (unpacks as `code, out, err`)."""

    code: int
    out: str
    err: str


def run_cli(capsys: pytest.CaptureFixture[str], *argv: Any) -> CliResult:
    """`gatesweep ARGV` in this process through `orchestrator.cli.main`, its stdout and stderr
    captured by pytest's `capsys`; argparse's own exits (`--help`, a usage error) are exit codes."""
    capsys.readouterr()  # what came before (progress bars, other calls) is not this command's
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 2)
    out = capsys.readouterr()
    return CliResult(code, out.out, out.err)


def one_line_error(result: tuple[int, str, str], *needles: str) -> str:
    """The result is the CLI's contract for bad input: exit 2, one line `gatesweep: error: ...`
    holding every needle, no traceback. Returns that line."""
    code, _, err = result
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("gatesweep: error: "), (code, err)
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def environ(changes: dict[str, str | None] | None) -> dict[str, str] | None:
    """This process's environment with `changes` (a None value removes the variable); None for none."""
    if changes is None:
        return None
    env = {**os.environ, **changes}
    return {k: v for k, v in env.items() if v is not None}


def gatesweep(
    *args: Any, cwd: Path | str | None = None, env: dict[str, str | None] | None = None, timeout: float = 600, **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    """`gatesweep ARGS` as its own process, output captured as text. `env`: changes to this
    process's environment (`environ`), not a replacement of it; `kwargs` go to `subprocess.run`."""
    return subprocess.run(
        [*GATESWEEP, *map(str, args)],
        cwd=cwd,
        env=environ(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        **kwargs,
    )


def start_gatesweep(
    *args: Any, cwd: Path | str | None = None, log: Path, env: dict[str, str | None] | None = None, **kwargs: Any
) -> subprocess.Popen[bytes]:
    """`gatesweep ARGS` started in the background, stdout and stderr both into the file `log`;
    the caller stops it by its pid (`proc.send_signal`, `proc.kill`) and waits for it."""
    out: IO[bytes] = open(log, "wb")
    return subprocess.Popen(
        [*GATESWEEP, *map(str, args)],
        cwd=cwd,
        env=environ(env),
        stdout=out,
        stderr=subprocess.STDOUT,
        **kwargs,
    )


def sweep_cli(*args: Any, cwd: Path, timeout: float = 600, address: str | None = None) -> subprocess.CompletedProcess[str]:
    """`gatesweep ARGS` run in `cwd` with its runs folder `cwd/runs` (`plan` takes none); with
    `address` (the `shared_ray` fixture's), on that Ray cluster instead of a local one of its own."""
    runs = [] if args[0] == "plan" else ["--runs-dir", cwd / "runs"]
    joined = ["--address", address] if address else []
    return gatesweep(*args, *runs, *joined, cwd=cwd, timeout=timeout)


def start_sweep(*args: Any, cwd: Path) -> subprocess.Popen[bytes]:
    """`sweep_cli` started in the background, its output in `cwd/driver.log`."""
    return start_gatesweep(*args, "--runs-dir", cwd / "runs", cwd=cwd, log=cwd / "driver.log")
