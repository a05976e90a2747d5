"""Packed text data: a prepared corpus (`prepare`) read as fixed-length windows.

Each split is one token stream (documents joined by the separator); it is cut into
non-overlapping windows of `seq_len` tokens, and every sequence is BOS + window, so the model's
input starts with BOS (the sink metrics measure attention to it) and every window token is a
target exactly once per epoch. Windows ignore document boundaries (GPT-2/nanoGPT packing: no
padding, no token thrown away; the separator tells the model where a document ends).

Training order: epoch e visits the windows in the order of a memory-free permutation seeded by
(seed, e) (`shuffle`), so batch `step` of rank `r` of `world` is a pure function of those: resume
reproduces the data exactly and ranks read disjoint windows. Windows are copied out of the
memory-mapped shards per batch; a trial holds its current batches, not its corpus.
"""

from __future__ import annotations

import sys

import numpy as np
import torch

from .prepare import DataSettings, Prepared, prepare
from .shards import TokenStream
from .shuffle import epoch_key, permute
from .sources import DataUnavailable
from .tokenizers import Tokenizer


def windows_with_bos(stream: TokenStream, windows: np.ndarray, seq_len: int, bos_id: int) -> torch.Tensor:
    """(len(windows), seq_len + 1): BOS, then window w's tokens [w·seq_len, (w+1)·seq_len)."""
    rows = np.empty((len(windows), seq_len + 1), dtype=np.int64)
    rows[:, 0] = bos_id
    for r, w in enumerate(windows):
        rows[r, 1:] = stream.read(int(w) * seq_len, seq_len)
    return torch.from_numpy(rows)


class TextData:
    def __init__(self, train: TokenStream, val: TokenStream, seq_len: int, tokenizer: Tokenizer, seed: int, name: str = "text"):
        self.name, self.seq_len, self.seed, self.tokenizer = name, seq_len, seed, tokenizer
        self.train, self.val = train, val
        self.n_train, self.n_val = len(train) // seq_len, len(val) // seq_len
        if self.n_train < 1 or self.n_val < 1:
            raise DataUnavailable(
                f"{name}: {len(train)} training and {len(val)} held-out tokens cannot fill one window of "
                f"data.seq_len={seq_len}; use a larger corpus, a larger val_fraction or a shorter seq_len"
            )
        self.vocab_size, self.bos_id = tokenizer.vocab_size, tokenizer.bos_id
        self.token_bytes = tokenizer.token_bytes
        self.prepared: Prepared | None = None

    def _rows(self, stream: TokenStream, windows: np.ndarray) -> torch.Tensor:
        return windows_with_bos(stream, windows, self.seq_len, self.bos_id)

    def train_windows(self, step: int, batch: int, rank: int = 0, world: int = 1) -> np.ndarray:
        """Which training windows batch `step` of `rank` reads."""
        i = np.arange((step * world + rank) * batch, (step * world + rank + 1) * batch, dtype=np.int64)
        epochs, pos = i // self.n_train, i % self.n_train
        out = np.empty_like(i)
        for e in np.unique(epochs):
            at = epochs == e
            out[at] = permute(pos[at], self.n_train, epoch_key(self.seed, int(e)))
        return out

    def train_batch(self, step: int, batch: int, rank: int = 0, world: int = 1) -> torch.Tensor:
        return self._rows(self.train, self.train_windows(step, batch, rank, world))

    def val_batches(self, n_batches: int, batch: int) -> list[torch.Tensor]:
        windows = np.arange(n_batches * batch) % self.n_val  # wraps if the held-out split is small
        return list(self._rows(self.val, windows).split(batch))

    def task_metrics(self, logits, seq) -> dict[str, float]:
        return {}

    def describe(self) -> dict:
        out = {
            "vocab_size": self.vocab_size,
            "tokenizer": self.tokenizer.name,
            "train_tokens": len(self.train),
            "val_tokens": len(self.val),
        }
        if self.prepared is not None:
            splits = self.prepared.meta["splits"]
            out.update(train_documents=splits["train"]["documents"], val_documents=splits["val"]["documents"])
        return out


def build_text_data(cfg, seed: int) -> TextData:
    prepared = prepare(DataSettings.of(cfg), progress=sys.stderr.isatty())  # a bar for `gatesweep train` in a terminal
    data = TextData(prepared.stream("train"), prepared.stream("val"), cfg.seq_len, prepared.tokenizer, seed, name=cfg.source)
    data.prepared = prepared
    return data


def heldout_windows(source: str, tokenizer: Tokenizer, seq_len: int, val_fraction: float, max_windows: int = 256) -> torch.Tensor:
    """The held-out split of another text source, encoded with *this* trial's tokenizer (a BPE
    trained on the training corpus must be reused, not retrained), as (N, seq_len + 1) windows
    that start with BOS. Prepared (and cached) like any corpus."""
    prepared = prepare(DataSettings(source, tokenizer.name, val_fraction), tokenizer)
    val = prepared.stream("val")
    n = min(len(val) // seq_len, max_windows)
    if n < 1:
        raise DataUnavailable(f"{source}: its held-out split has {len(val)} tokens, fewer than one window of {seq_len}")
    return windows_with_bos(val, np.arange(n), seq_len, tokenizer.bos_id)
