"""Batched, length-sorted evaluation requests (orchestrator.evals.lm, orchestrator.evals.batching):
results in request order and independent of the batching, the LM head run only where scored, an
out-of-memory error (injected on CPU) halving the batch and retrying, prompts cut from the left and
counted, stop strings found in the generation's tail, and generation refused at validation for an
attention kind without a KV-cache path."""

from __future__ import annotations

import logging

import pytest
import torch

from gatedmodels import GatedTransformer, ModelConfig
from gatedmodels.typedconfig import ConfigError
from orchestrator.data.tokenizers import byte_tokenizer
from orchestrator.evals.batching import Budget, is_oom, run_batches
from orchestrator.evals.harness import GatesweepLM, StopStrings
from orchestrator.evals.lm import generate_requests, greedy_generate, score_requests
from orchestrator.spec.trial import TrialConfig

TOK = byte_tokenizer()
V = TOK.vocab_size
BOS = TOK.bos_id


def tiny(seed: int = 0) -> GatedTransformer:
    torch.manual_seed(seed)
    return GatedTransformer(ModelConfig.preset("tiny", vocab_size=V, init_std=0.3, gate={"position": "G1"})).eval()


class FlakyMemory(GatedTransformer):
    """A model that runs out of memory (as CUDA would) on any pass of more than `fits` rows."""

    fits = 2
    passes: list[int]

    def hidden(self, input_ids_BT, **kw):
        self.passes.append(input_ids_BT.shape[0])
        if input_ids_BT.shape[0] > self.fits:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return super().hidden(input_ids_BT, **kw)


def flaky(seed: int = 0) -> FlakyMemory:
    torch.manual_seed(seed)
    model = FlakyMemory(ModelConfig.preset("tiny", vocab_size=V, init_std=0.3, gate={"position": "G1"})).eval()
    model.passes = []
    return model


def requests(n: int = 9, seed: int = 1) -> list[tuple[list[int], list[int]]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        ctx = [BOS, *torch.randint(0, 256, (int(torch.randint(1, 30, (1,), generator=g)),), generator=g).tolist()]
        out.append((ctx, torch.randint(0, 256, (1 + i % 3,), generator=g).tolist()))
    out.append((out[0][0], [7]))  # shares its model input with request 0 when that has one token
    return out


def test_scores_do_not_depend_on_the_batching_and_come_back_in_request_order():
    model, reqs = tiny(), requests()
    one, greedy_one, _ = score_requests(model, reqs, max_len=64, batch_size=1, batch_tokens=1)
    big, greedy_big, _ = score_requests(model, reqs, max_len=64, batch_size=16)
    assert big == pytest.approx(one, abs=1e-4) and greedy_big == greedy_one
    # the full-logits path of any callable gives the same numbers as the head-at-scored-positions path
    full, _, _ = score_requests(lambda ids: model(ids), reqs, max_len=64, batch_size=4)
    assert full == pytest.approx(big, abs=1e-4)
    # and each request alone, from the model's full logits
    with torch.no_grad():
        for (ctx, cont), score in zip(reqs, big):
            logp = model(torch.tensor([ctx + cont[:-1]]))[0].log_softmax(-1)
            assert score == pytest.approx(sum(float(logp[len(ctx) - 1 + j, t]) for j, t in enumerate(cont)), abs=1e-4)


def test_the_token_budget_sets_the_rows_of_each_batch():
    widths = [40, 40, 30, 20, 20, 10, 10, 10, 10, 5]
    seen: list[list[int]] = []
    run_batches(widths, lambda w: w, Budget(80), lambda batch: seen.append(batch))
    assert seen == [[40, 40], [30, 20], [20, 10, 10, 10], [10, 5]]  # rows = 80 // the first width
    with pytest.raises(ValueError, match="a batch budget of 0 tokens"):
        Budget(0)


def test_an_out_of_memory_error_halves_the_batch_and_retries(caplog):
    """Injected on CPU: the results equal an unconstrained run's, the budget stays halved, and the log says so."""
    reqs = requests(12)
    expected, _, _ = score_requests(tiny(), reqs, max_len=64, batch_size=64)
    model = flaky()
    with caplog.at_level(logging.WARNING, logger="orchestrator.evals.batching"):
        got, _, _ = score_requests(model, reqs, max_len=64, batch_size=64)
    assert got == pytest.approx(expected, abs=1e-4)
    assert max(model.passes) > 2 and model.passes[-1] <= 2 and "out of memory with" in caplog.text
    # generation too: the outputs of a retried batch are not doubled or lost
    prompts = [ctx for ctx, _ in reqs[:7]]
    model.passes.clear()
    assert greedy_generate(model, prompts, max_new_tokens=5, max_len=64, batch_size=64) == greedy_generate(
        tiny(), prompts, max_new_tokens=5, max_len=64, batch_size=64
    )
    assert model.passes[:3] == [7, 3, 1] and max(model.passes[2:]) <= 2  # 7 rows, 3, then what fits the halved budget


def test_one_row_that_does_not_fit_and_other_errors_are_raised_at_once():
    model = flaky()
    model.fits = 0
    with pytest.raises(torch.OutOfMemoryError):
        score_requests(model, requests(3), max_len=64, batch_size=8)
    assert model.passes[-1] == 1
    calls: list[int] = []

    def broken(batch):
        calls.append(len(batch))
        raise RuntimeError("shape mismatch")

    with pytest.raises(RuntimeError, match="shape mismatch"):
        run_batches([3, 3, 3], lambda w: w, Budget(9), broken)
    assert calls == [3]
    assert is_oom(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes"))
    assert not is_oom(ValueError("out of memory")) and not is_oom(RuntimeError("index out of range"))


def test_generation_cuts_long_prompts_from_the_left_and_counts_them():
    model = tiny()
    long, short = [BOS, *range(1, 60)], [BOS, 1, 2]
    outs, n_cut = generate_requests(model, [long, short], max_new_tokens=4, max_len=24, batch_size=2)
    assert n_cut == 1
    assert outs[0] == greedy_generate(model, [[BOS, *range(41, 60)]], max_new_tokens=4, max_len=64, batch_size=1)[0]


def test_cached_generation_equals_the_uncached_reference_through_lm():
    model = tiny()
    prompts = [ctx for ctx, _ in requests(6)]
    cached = greedy_generate(model, prompts, max_new_tokens=7, max_len=64, batch_size=3)
    assert cached == greedy_generate(model, prompts, max_new_tokens=7, max_len=64, batch_size=3, kv_cache=False)
    assert cached == greedy_generate(lambda ids: model(ids), prompts, max_new_tokens=7, max_len=64, batch_size=3)


def test_stop_strings_are_found_in_the_tail_as_in_the_whole_text():
    g = torch.Generator().manual_seed(0)
    until = ("Question:", "\n\n", "é!")
    stop = StopStrings(TOK, until)
    alphabet = list("Question: \néa!x".encode())
    stopped = 0
    for _ in range(300):  # a generation stops at the same step either way
        ids: list[int] = []
        for _ in range(60):
            ids.append(alphabet[int(torch.randint(0, len(alphabet), (1,), generator=g))])
            whole = any(u in TOK.decode(ids) for u in until)
            assert stop(ids) == whole, ids
            if whole:
                stopped += 1
                break
    assert stopped > 30
    assert not StopStrings(TOK, ())(list(b"Question:"))


def test_a_stop_string_that_never_appears_stops_at_the_budget_and_cuts_are_logged(caplog, monkeypatch):
    from lm_eval.api.instance import Instance

    import orchestrator.evals.harness as harness

    generated: list[list[int]] = []

    def recording(*a, **k):
        outs, n_cut = generate_requests(*a, **k)
        generated.extend(outs)
        return outs, n_cut

    monkeypatch.setattr(harness, "generate_requests", recording)
    lm = GatesweepLM(tiny(), TOK, max_len=48, batch_size=4)
    reqs = [Instance("generate_until", {}, ("x" * n, {"until": ["never-appears"], "max_gen_toks": 6}), 0) for n in (3, 70, 12)]
    with caplog.at_level(logging.WARNING, logger="orchestrator.evals.harness"):
        texts = lm.generate_until(reqs)
    assert len(texts) == 3 and [len(g) for g in generated] == [6, 6, 6]  # the whole budget
    assert lm.n_cut == 1 and "1 of 3 prompts longer than max_len 48 tokens: cut from the left, BOS kept" in caplog.text


def test_a_generating_trial_with_an_attention_kind_without_a_cache_path_is_refused(monkeypatch):
    import orchestrator.spec.evaluation as evaluation

    monkeypatch.setattr(evaluation, "KV_CACHE_KINDS", ("softmax",))
    base = {"data": {"source": "shakespeare"}, "model": {"size": "tiny", "attention": {"kind": "sigmoid"}}}
    with pytest.raises(
        ConfigError, match=r"model.attention.kind: got 'sigmoid', which has no KV-cache path .* eval.tasks.names\[1\] generates"
    ):
        TrialConfig.from_dict({**base, "eval": {"tasks": {"names": ["piqa", "gsm8k"]}}})
    with pytest.raises(ConfigError, match=r"no KV-cache path .* eval.ruler.enabled generates text; allowed with generation: softmax"):
        TrialConfig.from_dict({**base, "eval": {"ruler": {"enabled": True}}})
    TrialConfig.from_dict({**base, "eval": {"tasks": {"names": ["piqa"]}}})  # scoring needs no cache


def test_gatesweep_eval_refuses_generation_for_a_kind_without_a_cache_path(tmp_path, capsys, monkeypatch):
    import orchestrator.spec.evaluation as evaluation
    from orchestrator.cli.main import main

    monkeypatch.setattr(evaluation, "KV_CACHE_KINDS", ("softmax",))
    net = GatedTransformer(ModelConfig.preset("tiny", vocab_size=V, attention={"kind": "sigmoid"}))
    folder = tmp_path / "trial"
    folder.mkdir()
    torch.save({"model": net.state_dict(), "config": {"model": net.cfg.to_dict(), "data": {"source": "shakespeare"}}}, folder / "model.pt")
    for task in ("gsm8k", "ruler"):
        assert main(["eval", str(folder), "--tasks", f"piqa,{task}", "--no-log"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "model.attention.kind got 'sigmoid', which has no KV-cache path" in err
        assert f"--tasks {task} generates text; allowed with generation: softmax" in err


def test_rolling_loglikelihood_scores_all_documents_in_one_call_and_sums_per_document():
    from lm_eval.api.instance import Instance
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

    model = tiny()
    lm = GatesweepLM(model, TOK, max_len=16, batch_size=4)
    texts = ["a" * 5, "hello world, " * 4, "x"]
    got = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (t,), 0) for t in texts])
    for text, score in zip(texts, got):  # each document alone, one window at a time
        windows = [make_disjoint_window(w) for w in get_rolling_token_windows(TOK.encode([text])[0].tolist(), BOS, 15, 1)]
        assert len(windows) == -(-len(text) // 15)
        assert score == pytest.approx(sum(score_requests(model, [w], max_len=16, batch_size=1)[0][0] for w in windows), abs=1e-4)
