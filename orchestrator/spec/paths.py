"""Local paths in trial configs: made absolute against the folder of the file that names them (Ray runs
trials in other working directories), and checked on this machine before anything launches."""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gatedmodels.typedconfig import Issue, get_dotted, set_dotted, show
from orchestrator.core.errors import UserError
from orchestrator.data.sources import LOCAL_SUFFIXES, OFFLINE_CORPORA, ONLINE_ENV, SYNTHETIC, online
from orchestrator.evals.harness_data import base_task, data_problem
from orchestrator.spec.files import read_text

if TYPE_CHECKING:
    from orchestrator.spec.trial import TrialConfig

PATH_FIELDS = ("data.source", "data.tokenizer", "eval.tasks.data", "eval.tasks.paths", "eval.ppl_sets")
"""Trial-config fields that may hold a local path (eval.ppl_sets: a list of them; eval.tasks.paths: a mapping)."""
MAX_PATH_BYTES = 4096
MAX_NAME_BYTES = 255


def checked_path(value: str, check: Callable[[str], str | None]) -> str | None:
    """`check(value)` (a `*_problem` function that looks at the filesystem), guarded: a path the
    system cannot even look up (a NUL character, too long) or an OSError is a problem, not a crash."""
    if "\x00" in value:
        return f"got {show(value)}: a path may not contain NUL characters"
    if len(value.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        return f"got {show(value)}: longer than {MAX_PATH_BYTES:,} bytes, the system's limit for a path"
    if any(len(part.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES for part in value.split("/")):
        return f"got {show(value)}: a name in it is longer than {MAX_NAME_BYTES} bytes, the system's limit"
    try:
        return check(value)
    except (OSError, ValueError, RuntimeError) as err:
        return f"got {show(value)}: cannot be checked ({getattr(err, 'strerror', None) or err})"


def _is_local(field_path: str, value: Any) -> bool:
    """Whether `value` of `field_path` names a local file or folder (rather than a corpus,
    a Hub dataset, a tokenizer name...)."""
    if not isinstance(value, str) or not value.strip():
        return False
    if field_path == "data.tokenizer":
        return value.endswith(".json")
    if field_path in ("eval.tasks.data", "eval.tasks.paths"):
        return True
    return value not in SYNTHETIC and value not in OFFLINE_CORPORA and not value.startswith("hf:")


def _absolute(value: str, folder: Path) -> str:
    try:
        path = Path(value).expanduser()
    except RuntimeError:  # ~user of an unknown user: left as is, and reported as missing
        return value
    return value if path.is_absolute() else os.path.normpath(folder / path)


def resolve_paths(data: Any, folder: str | Path) -> Any:
    """Make the local paths of a raw trial-config dict (before validation) absolute against
    `folder`, in place; anything that is not a mapping of the expected shape is left alone."""
    folder = Path(folder).expanduser().absolute()
    if not isinstance(data, dict):
        return data
    for field_path in PATH_FIELDS:
        parent_path, _, leaf = field_path.rpartition(".")
        parent = get_dotted(data, parent_path)
        if not isinstance(parent, dict) or leaf not in parent:
            continue
        value = parent[leaf]
        if isinstance(value, list):
            parent[leaf] = [_absolute(v, folder) if _is_local(field_path, v) else v for v in value]
        elif isinstance(value, dict):
            parent[leaf] = {k: _absolute(v, folder) if _is_local(field_path, v) else v for k, v in value.items()}
        elif _is_local(field_path, value):
            parent[leaf] = _absolute(value, folder)
    return data


def touches_paths(dotted: Any) -> bool:
    """Whether a value set at `dotted` can hold one of the PATH_FIELDS."""
    return isinstance(dotted, str) and any(f == dotted or f.startswith(dotted + ".") for f in PATH_FIELDS)


def resolve_value(dotted: str, value: Any, folder: str | Path) -> Any:
    """`value` set at `dotted` (a sweep axis, an Optuna choice, a --set override), its local
    paths made absolute against `folder` (a copy; other values are returned as they are)."""
    if not touches_paths(dotted):
        return value
    holder: dict = {}
    set_dotted(holder, dotted, copy.deepcopy(value))
    resolve_paths(holder, folder)
    return get_dotted(holder, dotted, value)


def hub_problems(cfg: TrialConfig) -> list[Issue]:
    """An `hf:` source needs the Hub, which gatesweep uses only with GATESWEEP_ONLINE=1 (the
    launcher passes the variable to the trials). Checked when a trial is launched, not when a
    file is validated: the file may be meant for a machine that is online."""
    if online():
        return []
    hub = [("data.source", cfg.data.source)] + [(f"eval.ppl_sets[{i}]", s) for i, s in enumerate(cfg.eval.ppl_sets)]
    return [
        Issue(
            where,
            f"got {show(source)}: the Hugging Face Hub is off (gatesweep runs offline); set {ONLINE_ENV}=1 "
            "on a machine with network access, or use a local file or an offline corpus",
        )
        for where, source in hub
        if source.startswith("hf:")
    ]


def environment_problems(cfg: TrialConfig) -> list[Issue]:
    """What this config needs from the filesystem, checked before anything is launched: a local
    corpus folder with readable files of one kind, a tokenizer.json that is one, and the data of
    every harness task in eval.tasks (the folders given, or the copy setup.sh installs)."""
    out = []
    if _is_local("data.source", cfg.data.source):
        problem = checked_path(cfg.data.source, lambda p: _corpus_problem(Path(p), LOCAL_SUFFIXES))
        if problem:
            out.append(Issue("data.source", problem))
    if _is_local("data.tokenizer", cfg.data.tokenizer):
        problem = checked_path(cfg.data.tokenizer, _tokenizer_file_problem)
        if problem:
            out.append(Issue("data.tokenizer", problem))
    tasks = cfg.eval.tasks
    if tasks.names:  # offline data for every harness task, before anything trains
        for i, name in enumerate(tasks.names):
            task = base_task(name)
            if task is not None:
                problem = data_problem(name, tasks.data, tasks.paths.get(task.dataset))
                if problem:
                    out.append(Issue(f"eval.tasks.names[{i}]", problem))
    return out


def distinct_problems(configs: Iterable[TrialConfig], check: Callable[[TrialConfig], list[Issue]]) -> list[Issue]:
    """`check(cfg)` of each distinct data and evaluation section (the trials of a sweep share
    section objects), each problem once."""
    seen: set[tuple[int, int]] = set()
    issues: dict[str, Issue] = {}
    for cfg in configs:
        key = (id(cfg.data), id(cfg.eval))
        if key not in seen:
            seen.add(key)
            for issue in check(cfg):
                issues.setdefault(str(issue), issue)
    return list(issues.values())


def _corpus_problem(path: Path, suffixes: tuple[str, ...], max_entries: int = 100_000) -> str | None:
    """A local corpus is a non-empty regular file, or a folder of files of one supported kind
    (not a whole disk)."""
    if not path.is_dir():
        if path.exists() and not path.is_file():
            return f"got {show(str(path))}: not a regular file or folder"
        if path.is_file() and path.stat().st_size == 0:
            return f"got {show(str(path))}: the file is empty"
        return None
    kinds, seen, stack = set(), 0, [path]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                seen += 1
                if seen > max_entries:
                    return f"got {show(str(path))}: more than {max_entries:,} entries inside; point it at the corpus folder itself"
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                elif Path(entry.name).suffix.lower() in suffixes:
                    kinds.add(Path(entry.name).suffix.lower())
    if not kinds:
        return f"got {show(str(path))}: no {', '.join(suffixes)} files inside"
    if len(kinds) > 1:
        return f"got {show(str(path))}: mixed file types {sorted(kinds)}; use one kind per folder"
    return None


def _tokenizer_file_problem(path: str) -> str | None:

    try:
        data = json.loads(read_text(path, what="tokenizer.json", max_bytes=256 * 1024 * 1024))
    except UserError as err:
        return f"got {show(path)}: {str(err).split(': ', 1)[-1]}"
    except ValueError as err:
        return f"got {show(path)}: not JSON ({err})"
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        return f"got {show(path)}: not a Hugging Face tokenizer.json (no 'model' entry)"
    return None
