"""`gatesweep train` as a user runs it: clean errors for bad input, a full run, resume."""

from __future__ import annotations

import pytest

from tests.support.cli import run_cli
from tests.support.trials import EXAMPLE, FAST


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
def test_bad_configs_exit_2_with_the_field_and_no_traceback(tmp_path, monkeypatch, capsys, content, overrides, expected):
    monkeypatch.chdir(tmp_path)  # where the default store would be written
    path = tmp_path / "c.yaml"
    path.write_text(content)
    args = ["train", str(path)]
    for o in overrides:
        args += ["--set", o]
    code, _, err = run_cli(capsys, *args)  # in-process: an uncaught exception would fail the test here
    assert code == 2, err
    assert expected in err
    assert "Traceback" not in err
    assert str(path) in err or "--set" in err
    assert not (tmp_path / "mlflow.db").exists(), "nothing written to the store"


def test_missing_file_and_bad_tracking_uri(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(capsys, "train", "nope.yaml")
    assert code == 2 and "nope.yaml: no such file" in err
    code, _, err = run_cli(capsys, "train", EXAMPLE, "--tracking-uri", "ftp://x")
    assert code == 2 and "allowed schemes" in err


@pytest.mark.slow
def test_train_then_resume_refusal_and_resume(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # in-process: what the command does; `train` as a process: test_loopback.py, test_sweep_faults.py
    out = run_cli(capsys, "train", EXAMPLE, *FAST)
    assert out.code == 0, out.err
    assert "first_token_attn" in out.out and "MLflow run" in out.out
    assert (tmp_path / "mlflow.db").exists()
    again = run_cli(capsys, "train", EXAMPLE, *FAST)
    assert again.code == 2 and "--resume" in again.err
    resumed = run_cli(capsys, "train", EXAMPLE, *FAST, "--resume", "--quiet")
    assert resumed.code == 0, resumed.err
    run_id = out.out.split("MLflow run ")[1].split()[0]
    assert run_id in resumed.out, "resume continues the same MLflow run"
