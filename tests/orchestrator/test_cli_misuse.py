"""CLI misuse: exit status 2, one message naming the problem, no traceback, nothing launched and
nothing written (no store, no runs folder). Complements the malformed-file corpus of
test_sweep_spec.py and the bad trial configs of test_cli_train.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
QUICK = str(ROOT / "sweeps" / "quickstart.yaml")


def huge(tmp_path: Path) -> str:
    f = tmp_path / "huge.yaml"
    f.write_text(yaml.safe_dump({"name": "huge", "base": {"model": {"size": "tiny"}}, "grid": {"train.seed": list(range(600))}}))
    return str(f)


CASES = [
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["run"], "the following arguments are required: file"),
    (["run", "missing.yaml"], "missing.yaml: no such file"),
    (["run", QUICK, "--max-concurrent", "-1"], "--max-concurrent: got -1; allowed: 0..10,000"),
    (["run", QUICK, "--max-concurrent", "two"], "invalid int value: 'two'"),
    (["run", QUICK, "--tracking-uri", "ftp://example.org/x"], "allowed schemes"),
    (["run", QUICK, "--tracking-uri", "sqlite:///no/such/dir/m.db"], "does not exist"),
    (["run", "HUGE"], "600 trials; pass --yes"),
    (["resume", "never-launched"], "no sweep named 'never-launched'"),
    (["plan", "missing.yaml"], "missing.yaml: no such file"),
    (["eval", "not-a-run"], "not a file, a folder or an MLflow run id"),
    (["eval", QUICK, "--tasks", "bogus"], "--tasks: got 'bogus'"),
    (["train", QUICK], "name: unknown key"),  # a sweep file is not a trial config
    (["train", str(ROOT / "examples" / "bigram_g1.yaml"), "--resume"], "nothing to resume"),
    (["train", str(ROOT / "examples" / "bigram_g1.yaml"), "--set", "=3"], "the key must be a dotted path"),
    (["train", str(ROOT / "examples" / "bigram_g1.yaml"), "--resume", "--fresh"], "not allowed with argument"),
    (["validate"], "the following arguments are required: files"),
]


@pytest.mark.parametrize("args, expected", CASES, ids=lambda x: " ".join(x) if isinstance(x, list) else None)
def test_misuse_exits_2_without_traceback_or_side_effects(tmp_path, args, expected):
    args = [huge(tmp_path) if a == "HUGE" else a for a in args]
    out = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert expected in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    leftovers = {p.name for p in tmp_path.iterdir()} - {"huge.yaml"}
    assert not leftovers, f"wrote {leftovers}"


def test_validate_reports_good_and_bad_files_together(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nbase: {model: {size: tiny}}\ngrid: {model.gate.position: [G1, G8]}\n")
    out = subprocess.run([sys.executable, "-m", "orchestrator.cli", "validate", QUICK, str(bad)], capture_output=True, text=True)
    assert out.returncode == 2
    assert "valid sweep 'quickstart'" in out.stdout and "G8" in out.stderr
