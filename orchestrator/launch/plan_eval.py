"""The evaluation's cost in `gatesweep plan`: what the end-of-trial harness tasks of each trial take.

Without `--measure`, one line says which tasks run at which limit. With `--measure`, each distinct
(model, `eval.tasks`, tokenizer) is timed once: every configured task is loaded as the trial loads
it (the harness's own prompts and few-shot examples), its first documents are answered by
gatesweep's harness model (`GatesweepLM`: batched, length-sorted, KV-cached generation) on a model
of the trial's shape with random weights (speed does not depend on the weights), and the seconds
per document, times the documents the trial evaluates (`eval.tasks.limit`, per subject for MMLU,
or the whole split), is the estimate. Measured per document kind, since they differ by orders of
magnitude: a multiple-choice document is one forward pass over its choices, a generation document
(GSM8k) up to `max_gen_toks` (256) decoding steps; with random weights a generation never meets
its stop string and runs to that budget, so its estimate is an upper bound.

The trial's tokenizer stands as is (`byte`, `gpt2`, a tokenizer.json); a `bpe:N` tokenizer, which
is trained on the corpus, is stood in for by GPT-2's BPE with its ids folded into the N-token
vocabulary (token counts of a similar BPE; the model's own vocabulary for the LM head's cost).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from orchestrator.data.tokenizers import Tokenizer, build_tokenizer, gpt2_tokenizer
from orchestrator.ladder.plan import expected_vocab

from .plan_time import duration_text as _duration

DOCS = 8
"""Documents timed per loglikelihood or multiple-choice task."""
GEN_DOCS = 2
"""Documents timed per generation task (each up to 256 decoding steps)."""


@dataclass
class TaskCost:
    task: str
    kind: str
    """The harness's output type: multiple_choice, loglikelihood or generate_until."""
    documents: int
    """Documents a trial evaluates."""
    measured: int
    seconds: float
    """Seconds for the `measured` documents."""

    @property
    def per_doc(self) -> float:
        return self.seconds / max(1, self.measured)

    @property
    def total_s(self) -> float:
        return self.per_doc * self.documents


@dataclass
class EvalEstimate:
    tasks: list[TaskCost] = field(default_factory=list)
    note: str = ""

    @property
    def total_s(self) -> float:
        return sum(t.total_s for t in self.tasks)


@dataclass
class FoldedTokenizer(Tokenizer):
    """A tokenizer whose ids are folded into a smaller vocabulary (`bpe:N`'s stand-in)."""

    fold: int = 1

    def encode(self, texts: list[str]) -> list[Any]:
        return [ids % self.fold for ids in super().encode(texts)]


def stand_in_tokenizer(spec: str, vocab: int) -> tuple[Tokenizer, str]:
    """The tokenizer to time with, and a note when it stands in for the trial's (`bpe:N`)."""
    if not spec.startswith("bpe:"):
        return build_tokenizer(spec, lambda: iter(())), ""
    base = gpt2_tokenizer()
    eos = base.eos_id % vocab if base.eos_id is not None else None
    folded = FoldedTokenizer(
        name=base.name, vocab_size=vocab, bos_id=base.bos_id % vocab, token_bytes=base.token_bytes, hf=base.hf, eos_id=eos, fold=vocab
    )
    return folded, f"{spec} timed with GPT-2's BPE token counts"


def _leaves(loaded: dict) -> list:
    return [t for t in loaded["tasks"].values() if hasattr(t, "eval_docs")]


def measure_task(lm, name: str, tasks_cfg, *, docs: int = DOCS, gen_docs: int = GEN_DOCS) -> TaskCost:
    """Seconds of `lm` on the first documents of task `name` (a group: of its first subtasks)."""
    from orchestrator.evals.harness import load_tasks  # lazy: imports torch

    loaded = load_tasks([name], num_fewshot=tasks_cfg.num_fewshot, data_root=tasks_cfg.data, paths=dict(tasks_cfg.paths))
    leaves = _leaves(loaded)
    limit = tasks_cfg.limit
    documents = sum(len(t.eval_docs) if limit is None else min(limit, len(t.eval_docs)) for t in leaves)
    kind = leaves[0].OUTPUT_TYPE
    want = min(gen_docs if kind == "generate_until" else docs, documents)
    instances, taken = [], 0
    for task in leaves:
        if taken >= want:
            break
        n = min(want - taken, len(task.eval_docs), limit or len(task.eval_docs))
        task.set_fewshot_seed(seed=1234)
        task.build_all_requests(limit=n, rank=0, world_size=1)
        instances += task.instances
        taken += n
    t0 = time.perf_counter()
    if kind == "generate_until":
        lm.generate_until(instances)
    else:
        lm.loglikelihood(instances)
    return TaskCost(name, kind, documents, taken, time.perf_counter() - t0)


def estimate_eval(config, *, threads: int = 1) -> EvalEstimate:
    """The measured harness-task cost of one trial config (see the module docstring)."""
    import torch  # lazy: torch itself

    from gatedmodels import GatedTransformer  # lazy: imports torch
    from orchestrator.evals.harness import GatesweepLM  # lazy: imports torch

    tasks_cfg = config.eval.tasks
    if not tasks_cfg.names:
        return EvalEstimate()
    vocab = expected_vocab(config.data) or config.model.vocab_size
    tok, note = stand_in_tokenizer(config.data.tokenizer, vocab)
    before = torch.get_num_threads()
    torch.set_num_threads(max(1, threads))
    try:
        torch.manual_seed(0)
        model = GatedTransformer(config.model.replace(vocab_size=max(vocab, tok.vocab_size))).eval()
        lm = GatesweepLM(model, tok, max_len=tasks_cfg.max_len, batch_size=tasks_cfg.batch_size, batch_tokens=tasks_cfg.batch_tokens)
        return EvalEstimate([measure_task(lm, name, tasks_cfg) for name in tasks_cfg.names], note)
    finally:
        torch.set_num_threads(before)


class EvalColumn:
    """`plan`'s evaluation column (with --measure) and its summary lines."""

    def __init__(self, measure: bool, threads: int):
        self.measure, self.threads = measure, threads
        self.estimates: dict[str, EvalEstimate] = {}
        self.trials: dict[str, list[str]] = {}
        """Trial names per distinct evaluation (model, eval.tasks, tokenizer with --measure; else the tasks)."""
        self.configs: dict[str, Any] = {}
        self.total_s = 0.0

    def row(self, name: str, config, finished: bool) -> dict[str, str]:
        """The trial's column: its estimated evaluation time (only with --measure and tasks)."""
        tasks = config.eval.tasks
        if not tasks.names:
            return {}
        key = json.dumps([config.model.to_dict() if self.measure else None, tasks.to_dict(), config.data.tokenizer], sort_keys=True)
        self.configs.setdefault(key, config)
        self.trials.setdefault(key, []).append(name)
        if not self.measure:
            return {}
        if key not in self.estimates:
            self.estimates[key] = estimate_eval(config, threads=self.threads)
        est = self.estimates[key]
        if not finished:
            self.total_s += est.total_s
        return {"est. eval": _duration(est.total_s)}

    def lines(self, concurrency: int = 1) -> list[str]:
        """Summary lines: the tasks per distinct evaluation, and with --measure each kind's cost."""
        out = []
        for key, config in self.configs.items():
            t = config.eval.tasks
            names = self.trials[key]
            who = f"{names[0]}" + (f" and {len(names) - 1} more" if len(names) > 1 else "") if len(self.configs) > 1 else "each trial"
            limit = "all documents" if t.limit is None else f"limit {t.limit}"
            head = f"evaluation of {who}: {', '.join(t.names)} at {limit} (max_len {t.max_len}, batch {t.batch_size})"
            est = self.estimates.get(key)
            if est is None:
                out.append(head + "; --measure times them")
                continue
            kinds: dict[str, list[TaskCost]] = {}
            for cost in est.tasks:
                kinds.setdefault(cost.kind, []).append(cost)
            parts = [
                f"{kind} {sum(c.documents for c in cs):,} docs x {sum(c.seconds for c in cs) / max(1, sum(c.measured for c in cs)):.3g} s"
                for kind, cs in kinds.items()
            ]
            note = f"; {est.note}" if est.note else ""
            out.append(f"{head}: {'; '.join(parts)} = {_duration(est.total_s)} per trial{note}")
        if self.estimates:
            out.append(
                f"estimated evaluation time: {_duration(self.total_s / max(1, concurrency))} at {concurrency} trials at once "
                "(the harness tasks of the trials to run, timed here on random weights: a generation runs to its token budget)"
            )
        return out
