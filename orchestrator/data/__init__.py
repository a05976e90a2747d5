"""Trial data: `build_trial_data(cfg.data, seed)` returns an object with

- `vocab_size`, `bos_id`, `token_bytes` (UTF-8 bytes per token id, for bits per byte);
- `train_batch(step, batch, rank, world)`: (batch, seq_len + 1) token ids, BOS first, a pure
  function of (seed, step, rank), so a resumed trial sees exactly the data it would have seen;
- `val_batches(n, batch)`: a fixed held-out set, the same for every trial of a sweep;
- `task_metrics(logits, batch)`: metrics of the task itself (bigram-backcopy only).
"""

from __future__ import annotations

from .bigram_backcopy import BigramBackcopy
from .sources import DataUnavailable
from .text import TextData, build_text_data


def build_trial_data(cfg, seed: int):
    """`cfg` is a `DataConfig`."""
    if cfg.source == "bigram-backcopy":
        return BigramBackcopy(cfg.bigram, cfg.seq_len, seed)
    return build_text_data(cfg, seed)


__all__ = ["BigramBackcopy", "DataUnavailable", "TextData", "build_trial_data", "build_text_data"]
