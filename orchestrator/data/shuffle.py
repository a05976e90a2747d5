"""The training order: a permutation of a split's windows per epoch that needs no memory.

`permute(i, n, key)` is a bijection of [0, n) chosen by `key`, evaluated only where asked: a
four-round Feistel network on the smallest even number of bits that covers n, cycle-walked into
[0, n) (expected under 4 rounds of walking, since 2^bits < 4n). A 50-billion-token corpus has
millions of windows; `torch.randperm` would hold 8 bytes for each in every trial, this holds none,
and batch `step` of rank `r` stays a pure function of (seed, step, rank, world size).
"""

from __future__ import annotations

import numpy as np

_M1, _M2, _GOLDEN = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB), np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, element-wise on uint64 (wrapping arithmetic)."""
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def epoch_key(seed: int, epoch: int) -> int:
    return int(np.random.default_rng([seed, epoch]).integers(2**62))


def permute(i: np.ndarray, n: int, key: int) -> np.ndarray:
    """Where the permutation of [0, n) picked by `key` sends each index in `i` (int64 array)."""
    i = np.asarray(i, dtype=np.int64)
    if n < 1 or (i.size and (i.min() < 0 or i.max() >= n)):
        raise ValueError(f"indices must lie in [0, {n})")
    if n == 1:
        return np.zeros_like(i)
    bits = max(2, (n - 1).bit_length())
    bits += bits % 2
    half, mask = np.uint64(bits // 2), np.uint64((1 << (bits // 2)) - 1)
    rounds = _mix(np.arange(1, 5, dtype=np.uint64) * _GOLDEN + np.uint64(key % 2**63))

    def feistel(x: np.ndarray) -> np.ndarray:
        left, right = x >> half, x & mask
        for k in rounds:
            left, right = right, left ^ (_mix(right ^ k) & mask)
        return (left << half) | right

    with np.errstate(over="ignore"):
        out = feistel(i.astype(np.uint64))
        todo = out >= np.uint64(n)
        while todo.any():
            out[todo] = feistel(out[todo])
            todo = out >= np.uint64(n)
    return out.astype(np.int64)
