"""Trial data: sources, documents, the token cache, shards, shuffling, text windows and tokenizers.

Trial data: `build_trial_data(cfg.data, seed)` returns an object with

- `vocab_size`, `bos_id`, `token_bytes` (UTF-8 bytes per token id, for bits per byte);
- `train_batch(step, batch, rank, world)`: (batch, seq_len + 1) token ids, BOS first, a pure
  function of (seed, step, rank), so a resumed trial sees exactly the data it would have seen;
- `val_batches(n, batch)`: a fixed held-out set, the same for every trial of a sweep;
- `task_metrics(logits, batch)`: metrics of the task itself (bigram-backcopy only).

Text sources go documents (`documents`: streamed pieces and the held-out split) -> token shards
in the cache (`prepare`, `shards`) -> windows in a memory-free order (`text`, `shuffle`).
`sources` and `tokenizers` import without torch (config validation uses them); the rest loads
on first use.
"""

from __future__ import annotations

from importlib import import_module

from .sources import DataUnavailable

_LAZY = {"BigramBackcopy": "bigram_backcopy", "TextData": "text", "build_text_data": "text"}


def build_trial_data(cfg, seed: int):
    """`cfg` is a `DataConfig`."""
    if cfg.source == "bigram-backcopy":
        from .bigram_backcopy import BigramBackcopy  # lazy: torch (config validation loads this package)

        return BigramBackcopy(cfg.bigram, cfg.seq_len, seed)
    from .text import build_text_data  # lazy: torch (config validation loads this package)

    return build_text_data(cfg, seed)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'orchestrator.data' has no attribute {name!r}")


__all__ = ["BigramBackcopy", "DataUnavailable", "TextData", "build_text_data", "build_trial_data"]
