"""benchmarks/process_cpu.py: the CPU of a command's processes, by kind, and the command's exit code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parents[1] / "benchmarks" / "process_cpu.py"
BUSY = "import sys, time\nt = time.process_time()\nwhile time.process_time() - t < 1.0: pass\nsys.exit(3)"


def test_it_counts_a_busy_child_and_keeps_its_exit_code(tmp_path):
    out = subprocess.run(
        [sys.executable, TOOL, "--interval", "0.1", "--json", tmp_path / "cpu.json", "--", sys.executable, "-c", BUSY],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 3, out.stderr
    kinds = json.loads((tmp_path / "cpu.json").read_text())
    (kind,) = [k for k in kinds if "-c import sys, time" in k]  # the busy child, under its own command line
    assert 0.7 <= kinds[kind][0] <= 1.6 and kinds[kind][1] == 1, kinds
    assert "CPU-s seen in" in out.stderr.splitlines()[0]
    assert 0.2 <= kinds["machine busy"] <= 1  # the busy child alone keeps one of the CPUs busy for most of the run
    assert "busy over it" in out.stderr.splitlines()[1]


def test_no_command_is_a_usage_error():
    out = subprocess.run([sys.executable, TOOL, "--"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "no command given" in out.stderr
