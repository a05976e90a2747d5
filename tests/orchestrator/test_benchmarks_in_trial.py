"""Harness tasks, RULER-style and perplexity sets inside a trial and through `gatesweep eval`."""

from __future__ import annotations

import pytest

from orchestrator.spec.trial import TrialConfig
from orchestrator.trial.run import TrialContext, run_trial
from tests.support.cli import one_line_error, run_cli


def text_trial(**eval_over) -> TrialConfig:
    return TrialConfig.from_dict(
        {
            "model": {"size": "tiny", "gate": {"position": "G1"}},
            "data": {"source": "shakespeare", "tokenizer": "gpt2", "seq_len": 64, "max_chars": 400_000},
            "train": {"steps": 4, "batch_size": 4, "eval_every": 0, "warmup_steps": 1},
            "eval": {
                "batches": 1,
                "batch_size": 4,
                "probe_sequences": 2,
                "tasks": {"names": ["mmlu_abstract_algebra", "mmlu_virology", "arc_easy", "arc_easy_bpb"], "limit": 3, "max_len": 512},
                "ruler": {"enabled": True, "tasks": ["niah_single", "vt"], "lengths": [128, 256], "samples": 2},
                "ppl_sets": ["kjv"],
                **eval_over,
            },
        }
    )


@pytest.mark.slow
def test_benchmarks_run_at_the_end_of_a_trial_and_are_logged(tmp_path, tracking_uri):
    from mlflow.tracking import MlflowClient

    lines = []
    result = run_trial(text_trial(), TrialContext(run_dir=tmp_path / "r", tracking_uri=tracking_uri, progress=lines.append))
    m = MlflowClient(tracking_uri).get_run(result.run_id).data.metrics
    assert 0 <= m["mmlu_abstract_algebra/acc"] <= 1 and 0 <= m["mmlu_virology/acc"] <= 1 and "mmlu_virology/acc_stderr" in m
    assert 0 <= m["arc_easy/acc_norm"] <= 1 and m["arc_easy_bpb/bits_per_byte"] > 0
    # four letters per MMLU question (3 x 2 subjects), the 4 choices of ARC-Easy's first 3 questions, one gold answer each
    assert m["harness/requests"] == 3 * 4 * 2 + 3 * 4 + 3
    # vt needs 295 tokens with GPT-2's BPE: skipped at 128 and 256, and said so
    assert "ruler/niah_single/128" in m and "ruler/niah_single/256" in m and "ruler/vt/256" not in m
    assert any("vt" in line and "skipped" in line for line in lines)
    assert 0 <= m["ruler_avg/256"] <= 100
    assert m["ppl/kjv"] > 1 and m["bpb/kjv"] > 0
    assert m["eval_time_s/benchmarks"] > 0
    assert (tmp_path / "r" / "model.pt").exists()
    from orchestrator.core import metrics as registry

    unknown = sorted(k for k in m if registry.lookup(k) is None)  # every key the benchmarks log is a registry name
    assert not unknown, unknown


@pytest.mark.slow
def test_eval_command_logs_into_the_run_and_reuses_the_cache(tmp_path, tracking_uri, capsys, monkeypatch):
    cfg = text_trial(tasks={"names": []}, ruler={"enabled": False}, ppl_sets=[])
    result = run_trial(cfg, TrialContext(run_dir=tmp_path / "r", tracking_uri=tracking_uri))
    monkeypatch.chdir(tmp_path)  # in-process: what the command does, not its process
    args = [
        "eval",
        result.run_id,
        "--tasks",
        "mmlu,arc_easy,ppl",
        "--limit",
        "2",
        "--tracking-uri",
        tracking_uri,
        "--ppl-sets",
        "kjv,wikipedia",
    ]
    first = run_cli(capsys, *args)
    assert first.code == 0, first.err
    assert "mmlu/acc" in first.out and "arc_easy/acc_norm" in first.out and "ppl/wikipedia" in first.out
    again = run_cli(capsys, *args)
    assert again.code == 0 and "harness tasks mmlu, arc_easy: cached" in again.out
    from mlflow.tracking import MlflowClient

    m = MlflowClient(tracking_uri).get_run(result.run_id).data.metrics
    assert m["harness/requests"] >= 4 * 2 * 57 + 2 * 3  # four letters per MMLU question; ARC has 3 to 5 choices
    assert "mmlu_stem/acc" in m and "mmlu_anatomy/acc" in m and "ppl/kjv" in m and "bpb/wikipedia" in m
    one_line_error(
        run_cli(capsys, "eval", result.run_id, "--tasks", "mmlu,hellaswagg", "--tracking-uri", tracking_uri), "--tasks: got 'hellaswagg'"
    )


def test_benchmarks_need_text(tmp_path):
    from gatedmodels.typedconfig import ConfigError

    with pytest.raises(ConfigError, match="eval.tasks.names: needs a text data source"):
        TrialConfig.from_dict({"data": {"source": "bigram-backcopy"}, "eval": {"tasks": {"names": ["piqa"]}}})


@pytest.mark.parametrize("limit, scored", [(0, list(range(10))), (4, [0, 1, 2, 3]), (99, list(range(10)))])
def test_ppl_windows_scores_the_first_windows_only_and_keys_the_cache_by_it(monkeypatch, limit, scored):
    """`eval.ppl_windows` (what --smoke sets: the paper_text smoke scored three whole validation
    splits per trial) takes the split's first windows; 0 keeps the whole split and its old cache key."""
    from types import SimpleNamespace

    from orchestrator.evals import benchmarks as bm

    seen: list[list[int]] = []
    keys: list[dict] = []
    monkeypatch.setattr(bm, "heldout_windows", lambda name, tok, seq_len, frac: list(range(10)))
    monkeypatch.setattr(
        bm,
        "perplexity",
        lambda model, batches, token_bytes, device: seen.append([w for b in batches for w in b]) or SimpleNamespace(ppl=2.0, bpb=1.0),
    )
    monkeypatch.setattr(bm, "cached", lambda key, fn: (keys.append(key) or fn(), False))
    cfg = text_trial(ppl_windows=limit)
    bench = bm.Bench(model=None, tokenizer=SimpleNamespace(token_bytes=None), trial_cfg=cfg, device="cpu")
    bench.__dict__.update(weights="w", tok_id="t")  # the cached properties, without a model to hash
    out = bm.run_ppl(bench)
    assert seen == [scored] and out["ppl/kjv"] == 2.0
    assert keys[0].get("windows") == (limit or None)


def test_smoke_scores_one_batch_of_each_perplexity_set():
    from orchestrator.spec.sweep import SweepSpec, apply_smoke

    spec = SweepSpec.from_dict(
        {"name": "p", "base": {"data": {"source": "shakespeare", "tokenizer": "byte"}, "eval": {"ppl_sets": ["kjv"]}}}
    )
    assert apply_smoke(spec).base["eval"]["ppl_windows"] == 4 and spec.base["eval"].get("ppl_windows") is None
