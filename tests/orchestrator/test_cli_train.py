"""`gatesweep train` as a user runs it: clean errors for bad input, a full run, resume."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "bigram_g1.yaml"
FAST = [
    "--set",
    "train.steps=12",
    "--set",
    "train.eval_every=6",
    "--set",
    "train.log_every=3",
    "--set",
    "train.checkpoint_every=6",
    "--set",
    "data.seq_len=32",
    "--set",
    "eval.batches=1",
    "--set",
    "eval.batch_size=8",
    "--set",
    "eval.probe_sequences=4",
]


def gatesweep(*args, cwd):
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(
    "content, overrides, expected",
    [
        ("model: {size: bigram-1l, gate: {position: G9}}\n", [], "model.gate.position: got 'G9'; allowed: none, G1"),
        ("model: {size: bigram-1l}\ntrain: {steps: many}\n", [], "train.steps: got 'many'; expected an integer"),
        ("model: {size: bigram-1l}\ntrian: {steps: 3}\n", [], "trian: unknown key (did you mean 'train'?)"),
        ("model: {size: bigram-1l, gate: {position: G5, granularity: headwise}}\n", [], "model.gate.granularity"),
        ("model: {size: bigram-1l}\n", ["train.lr"], "expected KEY=VALUE"),
        ("model: {size: bigram-1l}\n", ["model.gate.position=G7"], "model.gate.position: got 'G7'"),
        ("model: {size: bigram-1l}\n", ["model.size.x=1"], "model.size"),
        ("model: !!python/object/apply:os.system ['echo pwned']\n", [], "not allowed"),
        ("model: {size: bigram-1l}\nmodel: {size: tiny}\n", [], "duplicate key 'model'"),
        ("- just\n- a list\n", [], "expected a mapping at the top level"),
        ("data: {source: /no/such/corpus.txt}\n", [], "data.source: got '/no/such/corpus.txt': no such file"),
        ("data: {tokenizer: bpe:12}\n", [], "data.tokenizer"),
    ],
)
def test_bad_configs_exit_2_with_the_field_and_no_traceback(tmp_path, content, overrides, expected):
    path = tmp_path / "c.yaml"
    path.write_text(content)
    args = ["train", str(path)]
    for o in overrides:
        args += ["--set", o]
    out = gatesweep(*args, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert expected in out.stderr
    assert "Traceback" not in out.stderr
    assert str(path) in out.stderr or "--set" in out.stderr
    assert not (tmp_path / "mlflow.db").exists(), "nothing written to the store"


def test_missing_file_and_bad_tracking_uri(tmp_path):
    out = gatesweep("train", "nope.yaml", cwd=tmp_path)
    assert out.returncode == 2 and "nope.yaml: no such file" in out.stderr
    out = gatesweep("train", str(EXAMPLE), "--tracking-uri", "ftp://x", cwd=tmp_path)
    assert out.returncode == 2 and "allowed schemes" in out.stderr


@pytest.mark.slow
def test_train_then_resume_refusal_and_resume(tmp_path):
    out = gatesweep("train", str(EXAMPLE), *FAST, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "first_token_attn" in out.stdout and "MLflow run" in out.stdout
    assert (tmp_path / "mlflow.db").exists()
    again = gatesweep("train", str(EXAMPLE), *FAST, cwd=tmp_path)
    assert again.returncode == 2 and "--resume" in again.stderr
    resumed = gatesweep("train", str(EXAMPLE), *FAST, "--resume", "--quiet", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    run_id = out.stdout.split("MLflow run ")[1].split()[0]
    assert run_id in resumed.stdout, "resume continues the same MLflow run"
