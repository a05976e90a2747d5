"""CLI misuse: exit status 2, one message naming the problem, no traceback, nothing launched and
nothing written (no store, no runs folder). Complements the malformed-file corpus of
test_sweep_spec.py and the bad trial configs of test_cli_train.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.support.cli import run_cli

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
def test_misuse_exits_2_without_traceback_or_side_effects(tmp_path, monkeypatch, capsys, args, expected):
    """In-process in the test's folder (an uncaught exception fails the test itself); the process
    contract (exit status, closed pipes, signals) is test_cli_contract.py's."""
    monkeypatch.chdir(tmp_path)
    args = [huge(tmp_path) if a == "HUGE" else a for a in args]
    code, out, err = run_cli(capsys, *args)
    assert code == 2, out + err
    assert expected in err, err
    assert "Traceback" not in err
    leftovers = {p.name for p in tmp_path.iterdir()} - {"huge.yaml"}
    assert not leftovers, f"wrote {leftovers}"


def test_validate_reports_good_and_bad_files_together(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nbase: {model: {size: tiny}}\ngrid: {model.gate.position: [G1, G8]}\n")
    code, out, err = run_cli(capsys, "validate", QUICK, bad)
    assert code == 2
    assert "valid sweep 'quickstart'" in out and "G8" in err
