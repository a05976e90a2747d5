"""The benchmarks' cache: results per checkpoint, keyed by a hash of the model weights and of
the benchmark's settings (`cached`), one JSON file per key under the evals cache folder."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import torch

from .. import storage
from ..data.tokenizers import cache_dir


def weights_hash(model: torch.nn.Module) -> str:
    """SHA-256 of the model's parameters and buffers (names, shapes, bytes)."""
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().to("cpu").contiguous()
        h.update(name.encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:24]


def _cache_file(key: str) -> Path:
    return cache_dir("evals") / f"{key}.json"


def cached(key_parts: dict, compute: Callable[[], dict[str, float]]) -> tuple[dict[str, float], bool]:
    """(metrics, hit): `compute()` once per key; later calls read the JSON cache."""
    key = hashlib.sha256(json.dumps(key_parts, sort_keys=True, default=str).encode()).hexdigest()[:32]
    path = _cache_file(key)
    if path.exists():
        try:
            return json.loads(path.read_text()), True
        except (OSError, json.JSONDecodeError):
            pass
    metrics = compute()
    storage.write_json(path, metrics)
    return metrics, False
