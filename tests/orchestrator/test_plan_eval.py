"""`gatesweep plan`'s evaluation estimate (orchestrator/cli/plan_eval.py): the documents a trial
evaluates per task (limits, groups, whole splits), the timing of a few of them on the trial's
model shape, the stand-in tokenizer of `bpe:N`, and the column and summary lines of the plan."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

import orchestrator.evals.harness as harness
from orchestrator.launch import plan_eval
from orchestrator.launch.plan_eval import EvalColumn, EvalEstimate, TaskCost, measure_task, stand_in_tokenizer
from orchestrator.spec.evaluation import TasksConfig
from orchestrator.spec.trial import TrialConfig


class FakeTask:
    def __init__(self, n: int, kind: str = "multiple_choice"):
        self.eval_docs = list(range(n))
        self.OUTPUT_TYPE = kind
        self.instances: list = []

    def set_fewshot_seed(self, seed: int) -> None:
        pass

    def build_all_requests(self, limit: int, rank: int, world_size: int) -> None:
        self.instances = [f"doc{i}" for i in range(limit)]


class FakeLM:
    def __init__(self):
        self.calls: list[tuple[str, list]] = []

    def loglikelihood(self, instances):
        self.calls.append(("loglikelihood", list(instances)))

    def generate_until(self, instances):
        self.calls.append(("generate_until", list(instances)))


def test_documents_follow_the_limit_per_subtask_and_the_timed_ones_span_subtasks(monkeypatch):
    leaves = {"a": FakeTask(5), "b": FakeTask(300), "c": FakeTask(40)}
    monkeypatch.setattr(harness, "load_tasks", lambda names, **kw: {"tasks": leaves, "groups": {}})
    lm = FakeLM()
    cost = measure_task(lm, "group", TasksConfig(names=["piqa"], limit=100), docs=8)
    assert cost.documents == 5 + 100 + 40 and cost.measured == 8 and cost.kind == "multiple_choice"
    assert lm.calls == [("loglikelihood", [f"doc{i}" for i in range(5)] + ["doc0", "doc1", "doc2"])]
    cost = measure_task(lm, "group", TasksConfig(names=["piqa"], limit=None), docs=8)
    assert cost.documents == 345  # no limit: every document of every subtask
    monkeypatch.setattr(harness, "load_tasks", lambda names, **kw: {"tasks": {"gsm8k": FakeTask(1319, "generate_until")}})
    cost = measure_task(lm, "gsm8k", TasksConfig(names=["gsm8k"], limit=2), docs=8, gen_docs=2)
    assert (cost.documents, cost.measured, lm.calls[-1][0]) == (2, 2, "generate_until")
    assert TaskCost("t", "k", 100, 4, 2.0).total_s == pytest.approx(50.0)
    assert TaskCost("t", "k", 100, 0, 0.0).total_s == 0.0


def test_bpe_tokenizers_are_stood_in_for_by_gpt2_folded_into_their_vocabulary():
    tok, note = stand_in_tokenizer("bpe:300", 300)
    ids = tok.encode(["Natalia sold clips to 48 of her friends."])[0]
    assert len(ids) > 5 and int(np.max(ids)) < 300 and 0 <= tok.bos_id < 300 and "GPT-2" in note
    tok, note = stand_in_tokenizer("byte", 257)
    assert tok.name == "byte" and note == ""


def test_the_column_and_the_lines(monkeypatch):
    cfg = TrialConfig.from_dict({"data": {"source": "shakespeare"}, "eval": {"tasks": {"names": ["piqa", "gsm8k"], "limit": 10}}})
    bare = TrialConfig.from_dict({"data": {"source": "shakespeare"}})
    col = EvalColumn(measure=False, threads=1)
    assert col.row("t0", cfg, finished=False) == {} and col.row("t1", bare, finished=False) == {}
    assert col.lines() == ["evaluation of each trial: piqa, gsm8k at limit 10 (max_len 2048, batch 16); --measure times them"]
    timed: list[str] = []

    def fake(config, threads):
        timed.append(config.model.gate.position)
        return EvalEstimate([TaskCost("piqa", "multiple_choice", 10, 5, 1.0), TaskCost("gsm8k", "generate_until", 10, 2, 4.0)])

    monkeypatch.setattr(plan_eval, "estimate_eval", fake)
    col = EvalColumn(measure=True, threads=1)
    g1 = cfg.replace(model=cfg.model.replace(gate=cfg.model.gate.replace(position="G1")))
    assert col.row("none", cfg, finished=False) == {"est. eval": "22 s"}
    assert col.row("none-seed1", cfg, finished=True) == {"est. eval": "22 s"}  # finished: not in the total
    assert col.row("G1", g1, finished=False) == {"est. eval": "22 s"}
    assert timed == ["none", "G1"]  # each distinct model timed once
    lines = col.lines(concurrency=2)
    assert lines[0].startswith("evaluation of none and 1 more: piqa, gsm8k at limit 10")
    assert "multiple_choice 10 docs x 0.2 s; generate_until 10 docs x 2 s = 22 s per trial" in lines[0]
    assert lines[-1].startswith("estimated evaluation time: 22 s at 2 trials at once")


@pytest.mark.slow
def test_plan_measure_times_the_harness_tasks_of_each_trial(tmp_path, capsys):
    """The real thing, in process: a tiny byte-level model, piqa and GSM8k timed on real documents."""
    from orchestrator.cli.main import main

    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        textwrap.dedent(
            """
            name: evalplan
            base:
              model: {size: tiny}
              data: {source: shakespeare, seq_len: 32}
              train: {steps: 10, batch_size: 2}
              eval: {tasks: {names: [piqa, gsm8k], limit: 3, max_len: 1024}}
            grid: {model.gate.position: [none, G1]}
            """
        )
    )
    assert main(["plan", str(sweep), "--measure", "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"]) == 0
    out = capsys.readouterr().out
    assert "est. eval" in out and out.count("evaluation of ") == 2
    line = next(x for x in out.splitlines() if x.startswith("evaluation of none"))
    assert "multiple_choice 3 docs x " in line and "generate_until 3 docs x " in line and "per trial" in line
    assert "estimated evaluation time:" in out
