"""Benchmarks through lm-evaluation-harness (issue 15): pinned prompts and scores per task family on
the offline data, the gold-bits-per-byte variant, MMLU parity with the reference
implementation in tests/orchestrator/mmlu_reference, and the error paths (unknown task, data not installed, bad paths)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gatedmodels.typedconfig import ConfigError
from orchestrator.data.sources import DataUnavailable
from orchestrator.data.tokenizers import byte_tokenizer
from orchestrator.evals.harness import GatesweepLM, load_tasks, run_tasks
from orchestrator.evals.harness_data import data_problem, locate, task_names
from orchestrator.spec.trial import TrialConfig

TOK = byte_tokenizer()
V = TOK.vocab_size


def uniform(ids_BT: torch.Tensor) -> torch.Tensor:
    """A 'model' whose every next-token distribution is uniform: log p(token) = -log V."""
    return torch.zeros(*ids_BT.shape, V)


class Recording(GatesweepLM):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.contexts: list[str] = []

    def _loglikelihood_tokens(self, requests, **kw):
        self.contexts += [ctx for (ctx, _), _, _ in requests]
        return super()._loglikelihood_tokens(requests, **kw)


def _expected_uniform_acc(task, limit: int) -> tuple[float, float]:
    """(acc, acc_norm) a uniform model gets: every byte costs log V, so acc picks the choice with
    the fewest bytes (delimiter included), and acc_norm (log-likelihood / characters of the choice)
    the longest; ties go to the first, as np.argmax."""
    docs = list(task.eval_docs)[:limit]
    acc, acc_norm = [], []
    for doc in docs:
        choices = task.doc_to_choice(doc)
        gold = task.doc_to_target(doc)
        ll = np.array([-len((task.config.target_delimiter + c).encode()) * math.log(V) for c in choices])
        acc.append(int(np.argmax(ll)) == gold)
        acc_norm.append(int(np.argmax(ll / np.array([len(c) for c in choices]))) == gold)
    return float(np.mean(acc)), float(np.mean(acc_norm))


@pytest.mark.parametrize(
    "name, first_context",
    [
        ("arc_easy", "Question: Which technology was developed most recently?\nAnswer:"),
        ("piqa", "Question: How do I ready a guinea pig cage for it's new occupants?\nAnswer:"),
        ("hellaswag", "Roof shingle removal: A man is sitting on a roof. He"),
    ],
)
@pytest.mark.slow
def test_multiple_choice_prompt_and_score_are_the_harness_s(name, first_context):
    loaded = load_tasks([name], num_fewshot=None)
    task = loaded["tasks"][name]
    out = run_tasks(uniform, TOK, [name], limit=6, max_len=512, batch_size=8)
    acc, acc_norm = _expected_uniform_acc(task, 6)
    assert out[f"{name}/acc"] == pytest.approx(acc) and out[f"{name}/acc_norm"] == pytest.approx(acc_norm)
    assert f"{name}/acc_stderr" in out and out["harness/requests"] == sum(len(task.doc_to_choice(d)) for d in list(task.eval_docs)[:6])
    lm = Recording(uniform, TOK, max_len=512, batch_size=8)
    task.build_all_requests(limit=1, rank=0, world_size=1)
    lm.loglikelihood([task.instances[0]])
    assert lm.contexts[0] == first_context


@pytest.mark.slow
def test_loglikelihood_family_lambada():
    out = run_tasks(uniform, TOK, ["lambada_openai"], limit=4, max_len=1024, batch_size=4)
    loaded = load_tasks(["lambada_openai"], num_fewshot=None)
    task = loaded["tasks"]["lambada_openai"]
    targets = [task.doc_to_target(d) for d in list(task.eval_docs)[:4]]
    assert targets[0] == " signs"
    # perplexity = exp(-mean log-likelihood), each target costing len(bytes) * log V
    assert out["lambada_openai/perplexity"] == pytest.approx(math.exp(np.mean([len(t.encode()) * math.log(V) for t in targets])), rel=1e-6)
    assert out["lambada_openai/acc"] == 0.0  # a uniform model's argmax (token 0) is never the target


@pytest.mark.slow
def test_generation_family_gsm8k_uses_the_harness_answer_extraction():
    """A 'model' that always writes the gold answer line for the first question scores 1 on it."""
    loaded = load_tasks(["gsm8k"], num_fewshot=0)
    task = loaded["tasks"]["gsm8k"]
    doc = list(task.eval_docs)[0]
    answer = "The answer follows.\n#### 18\n\nQuestion:"
    ids = TOK.encode([answer])[0].tolist()

    marker = TOK.encode(["Answer:"])[0].tolist()

    def scripted(ids_BT: torch.Tensor) -> torch.Tensor:
        """Writes `answer` after the prompt's last "Answer:" (the generated text has none)."""
        logits = torch.full((*ids_BT.shape, V), -1e4)
        for b, row in enumerate(ids_BT.tolist()):
            end = max(i + len(marker) for i in range(len(row) - len(marker) + 1) if row[i : i + len(marker)] == marker)
            for t in range(ids_BT.shape[1]):
                logits[b, t, ids[min(max(t + 1 - end, 0), len(ids) - 1)]] = 0.0
        return logits

    assert doc["answer"].endswith("#### 18")
    out = run_tasks(scripted, TOK, ["gsm8k"], limit=1, num_fewshot=0, max_len=1024, batch_size=1)
    assert out["gsm8k/exact_match/strict-match"] == 1.0
    assert out["gsm8k/exact_match/flexible-extract"] == 1.0


@pytest.mark.slow
def test_gold_bits_per_byte_of_a_uniform_model_is_log2_of_the_vocabulary():
    out = run_tasks(uniform, TOK, ["arc_easy_bpb", "sciq_bpb"], limit=5, max_len=1024, batch_size=8)
    for name in ("arc_easy_bpb", "sciq_bpb"):
        assert out[f"{name}/bits_per_byte"] == pytest.approx(math.log2(V), rel=1e-9)


@pytest.mark.slow
def test_mmlu_through_the_harness_predicts_as_the_reference_implementation():
    """The reference MMLU (tests/orchestrator/mmlu_reference, checked question by question against
    the harness's template) is the oracle: a random small model gives the same accuracy per
    subject through the harness path, 5-shot."""
    from .mmlu_reference import run_mmlu

    torch.manual_seed(0)
    from gatedmodels import GatedTransformer

    cfg = TrialConfig.from_dict({"model": {"size": "tiny", "vocab_size": V}, "data": {"source": "shakespeare"}})
    model = GatedTransformer(cfg.model).eval()
    subjects = ["abstract_algebra", "anatomy", "virology"]
    ref = run_mmlu(model, TOK, subjects=subjects, limit=6, max_len=2048, batch_size=8)
    out = run_tasks(model, TOK, [f"mmlu_{s}" for s in subjects], limit=6, num_fewshot=5, max_len=2048, batch_size=8)
    for s in subjects:
        assert out[f"mmlu_{s}/acc"] == pytest.approx(ref.per_subject[s]), s
    assert out["harness/cut_contexts"] == ref.n_cut


@pytest.mark.slow
def test_mmlu_group_reports_its_four_categories():
    out = run_tasks(uniform, TOK, ["mmlu"], limit=2, max_len=2048, batch_size=16)  # 2: a stderr needs two samples
    for group in ("mmlu", "mmlu_stem", "mmlu_humanities", "mmlu_social_sciences", "mmlu_other"):
        assert 0 <= out[f"{group}/acc"] <= 1 and f"{group}/acc_stderr" in out
    assert sum(k.startswith("mmlu_") and k.endswith("/acc") for k in out) == 57 + 4


# ---- errors --------------------------------------------------------------------------------------
def test_a_task_whose_data_is_not_installed_names_the_task_and_where(tmp_path, monkeypatch):
    monkeypatch.delenv("GATESWEEP_ONLINE", raising=False)
    problem = data_problem("hellaswag", tmp_path)
    assert problem.startswith("task hellaswag: its data is not in") and str(tmp_path) in problem and "GATESWEEP_ONLINE=1" in problem
    with pytest.raises(DataUnavailable, match="task hellaswag"):
        locate("hellaswag", tmp_path)
    with pytest.raises(ConfigError, match=r"eval.tasks.names\[0\]: task gsm8k: its data is not in"):
        from orchestrator.spec.paths import environment_problems

        cfg = TrialConfig.from_dict({"data": {"source": "shakespeare"}, "eval": {"tasks": {"names": ["gsm8k"], "data": str(tmp_path)}}})
        issues = environment_problems(cfg)
        raise ConfigError(issues)


def test_bad_task_configs_are_refused_with_the_field():
    def refuse(tasks: dict, match: str):
        with pytest.raises(ConfigError, match=match):
            TrialConfig.from_dict({"data": {"source": "shakespeare"}, "eval": {"tasks": tasks}})

    refuse(
        {"names": ["hellaswagg"]},
        r"eval.tasks.names\[0\]: got 'hellaswagg' \(did you mean 'hellaswag'\?\); allowed: hellaswag, arc_easy, .*, mmlu_<subject>",
    )
    refuse({"names": ["arc_easy", "arc_easy"]}, r"names\[1\]: got 'arc_easy' twice")
    refuse({"names": ["winogrande_bpb"]}, r"names\[0\]: got 'winogrande_bpb'")
    refuse({"names": ["mmlu_astrology"]}, r"names\[0\]: got 'mmlu_astrology'")
    refuse({"names": ["piqa"], "paths": {"piqaa": "/tmp"}}, r"eval.tasks.paths.piqaa: unknown dataset")
    refuse({"names": ["piqa"], "paths": {"piqa": "/no/such/folder"}}, r"eval.tasks.paths.piqa: got '/no/such/folder': not a folder")
    refuse({"names": ["piqa"], "limit": 0}, r"eval.tasks.limit: got 0")
    refuse({"names": ["piqa"], "num_fewshot": 1000}, r"eval.tasks.num_fewshot: got 1000")
    with pytest.raises(ConfigError, match="eval.tasks.names: needs a text data source"):
        TrialConfig.from_dict({"data": {"source": "bigram-backcopy"}, "eval": {"tasks": {"names": ["piqa"]}}})
    with pytest.raises(ConfigError, match=r"eval.mmlu: unknown key"):
        TrialConfig.from_dict({"data": {"source": "shakespeare"}, "eval": {"mmlu": {"enabled": True}}})
    assert "mmlu_virology" in task_names() and "hellaswag_bpb" in task_names()


@pytest.mark.slow
def test_an_explicit_dataset_folder_is_read_as_given(tmp_path):
    """`eval.tasks.paths` points a dataset at any folder datasets can read, with the harness's own
    splits (piqa's task reads train and validation); a folder without them is one clear line."""
    import shutil

    built, overrides = locate("piqa")
    assert overrides == {"training_split": None}
    copy = tmp_path / "piqa"
    shutil.copytree(built, copy)
    where, overrides = locate("piqa", paths={"piqa": str(copy)})
    assert where == str(copy) and overrides == {}
    with pytest.raises(DataUnavailable, match=r"task piqa: the harness cannot load its data from .*piqa \(KeyError: 'train'\)"):
        run_tasks(uniform, TOK, ["piqa"], limit=3, max_len=512, batch_size=4, paths={"piqa": str(copy)})
    readme = (copy / "README.md").read_text()
    (copy / "README.md").write_text(
        readme.replace("  data_files:\n", "  data_files:\n  - split: train\n    path: default/validation.parquet\n")
    )
    out = run_tasks(uniform, TOK, ["piqa"], limit=3, max_len=512, batch_size=4, paths={"piqa": str(copy)})
    assert out["piqa/acc_norm"] == pytest.approx(run_tasks(uniform, TOK, ["piqa"], limit=3, max_len=512, batch_size=4)["piqa/acc_norm"])


def test_the_task_manager_reads_only_the_tasks_folders_and_finds_what_the_whole_catalogue_does():
    """Each task's definition is where `HarnessTask.folder` says in this harness (the same file its
    whole catalogue resolves), and a task not there falls back to the whole catalogue."""
    from dataclasses import replace

    from lm_eval.tasks import TaskManager

    from orchestrator.evals import harness, harness_data

    whole = TaskManager()._index
    small = harness.task_manager(task_names())._index
    assert len(small) < len(whole) / 10  # their folders, not the catalogue
    for name in task_names():
        task = harness_data.base_task(name)
        assert small[task.name].yaml_path == whole[task.name].yaml_path, name
    assert set(harness.task_manager(["piqa"])._index) <= {"piqa"} | {k for k in small if k.startswith("piqa")}

    moved = {**harness_data.TASKS, "piqa": replace(harness_data.TASKS["piqa"], folder="hellaswag")}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(harness_data, "TASKS", moved)
        assert harness.task_manager(["piqa"])._index["piqa"].yaml_path == whole["piqa"].yaml_path
