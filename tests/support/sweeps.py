"""The tiny sweep most tests launch: a one-layer bigram model, 30 steps of batch 8 on the
Bigram-Backcopy task, one eval batch; a few seconds a trial on a CPU."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

TINY_BASE: dict[str, Any] = {
    "model": {"size": "bigram-1l"},
    "data": {"seq_len": 32},
    "train": {"steps": 30, "batch_size": 8, "warmup_steps": 2, "eval_every": 15, "log_every": 5},
    "eval": {"batches": 1, "batch_size": 8, "probe_sequences": 4},
}


def tiny_base(**sections: dict[str, Any]) -> dict[str, Any]:
    """A copy of `TINY_BASE` with each named section updated key by key (`train={"steps": 8}`)."""
    base = copy.deepcopy(TINY_BASE)
    for section, values in sections.items():
        base[section] = {**base.get(section, {}), **values}
    return base


def tiny_sweep(name: str, *, experiment: str = "e", **fields: Any) -> dict[str, Any]:
    """A sweep document: `tiny_base` (updated by a `base=` of sections), tracked in `experiment`,
    plus the other top-level fields as given (`grid=`, `zip=`, `search=`...)."""
    base = tiny_base(**fields.pop("base", {}))
    return {"name": name, "base": base, "tracking": {"experiment": experiment}, **fields}


def write_yaml(path: Path, doc: dict[str, Any]) -> Path:
    """`doc` as YAML at `path` (keys in their order); returns `path`."""
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def write_sweep(folder: Path, name: str, **fields: Any) -> Path:
    """`tiny_sweep(name, **fields)` written to `folder/<name>.yaml`."""
    return write_yaml(folder / f"{name}.yaml", tiny_sweep(name, **fields))
