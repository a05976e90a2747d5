"""The KV cache of greedy generation: per layer, what attention keeps of the tokens already seen.

A generation step runs the model on the new tokens only (the whole prompt first, then one token
per row): each attention layer appends its new keys and values to its `LayerCache` and attends
over everything cached. What is cached is what the attention kind receives (`AttentionKind.attend`):
keys and values after QK-norm, the G3/G2 gates and RoPE. A G2/G3 gate's score comes from the key
or value token's own input, so the gated key or value of a past token never changes and caching it
is exact; G1, G4 and G5 gate the query token, which is always a new one.

Rows of a batch have prompts of different lengths: they are left-padded, and `KVCache` keeps per
row which columns hold real tokens and the position of the next one, so a token's RoPE or learned
position is its place in its own row (BOS at 0) and no query attends to padding. A padding query
attends to itself only (its output is never read; no row of scores is empty, so nothing is NaN).

Extension point: `AttentionKind.new_cache` returns the `LayerCache` of its kind (keys and values by
default); a kind that keeps something else (a compressed latent) returns its own subclass with
`append` and `select`, and implements `attend` over what that returns.

Shape legend: B batch rows, K kv heads, T new tokens, S cached columns (keys), d head width.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


class NoCachePath(NotImplementedError):
    """The model's attention kind has no KV-cache path (`AttentionKind.attend`)."""


class LayerCache:
    """What one attention layer keeps of past tokens. Subclasses implement `append` (store the new
    step's tensors, return what the layer attends over) and `select` (keep some batch rows)."""

    def append(self, k_BKTd: torch.Tensor, v_BKTd: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def select(self, rows_B: torch.Tensor) -> None:
        raise NotImplementedError


class KVLayerCache(LayerCache):
    """Keys and values of every cached column, preallocated to `capacity` columns."""

    def __init__(self, batch: int, kv_heads: int, capacity: int, head_dim: int, dtype: torch.dtype, device: torch.device):
        self.k_BKSd = torch.zeros(batch, kv_heads, capacity, head_dim, dtype=dtype, device=device)
        self.v_BKSd = torch.zeros(batch, kv_heads, capacity, head_dim, dtype=dtype, device=device)
        self.length = 0

    def append(self, k_BKTd: torch.Tensor, v_BKTd: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        end = self.length + k_BKTd.shape[2]
        if end > self.k_BKSd.shape[2]:
            raise ValueError(f"KV cache full: it holds {self.k_BKSd.shape[2]} tokens, this step needs {end}")
        self.k_BKSd[:, :, self.length : end] = k_BKTd
        self.v_BKSd[:, :, self.length : end] = v_BKTd
        self.length = end
        return self.k_BKSd[:, :, :end], self.v_BKSd[:, :, :end]

    def select(self, rows_B: torch.Tensor) -> None:
        self.k_BKSd = self.k_BKSd[rows_B]
        self.v_BKSd = self.v_BKSd[rows_B]


@dataclass
class CacheStep:
    """Where the new tokens of one step stand: per-row positions and which keys each query sees."""

    positions_BT: torch.Tensor
    """Each new token's position in its own row (padding: 0, never read)."""
    n_positions: int
    """The largest position + 1 (the length of the RoPE tables the step needs)."""
    mask_B1TS: torch.Tensor
    """True where a query may attend to a key: a real key at or before the query's column."""
    causal: bool = False
    """The step is a plain causal pass (an empty cache, no padding): the kinds' training path applies."""
    _bias: dict[torch.dtype, torch.Tensor] = field(default_factory=dict)

    def bias(self, dtype: torch.dtype) -> torch.Tensor:
        """`mask_B1TS` as an additive mask (0 or -inf) of `dtype`, made once per step (SDPA would
        convert a boolean mask in every layer)."""
        if dtype not in self._bias:
            self._bias[dtype] = torch.zeros(self.mask_B1TS.shape, dtype=dtype, device=self.mask_B1TS.device).masked_fill_(
                ~self.mask_B1TS, float("-inf")
            )
        return self._bias[dtype]


class KVCache:
    """The cache of a whole model: one `LayerCache` per layer, plus the bookkeeping of the rows
    (which columns are real tokens, each row's next position) that every layer shares."""

    def __init__(self, layers: list[LayerCache], batch: int, capacity: int, device: torch.device):
        self.layers = layers
        self.capacity = capacity
        self.valid_BS = torch.zeros(batch, capacity, dtype=torch.bool, device=device)
        self.next_pos_B = torch.zeros(batch, dtype=torch.long, device=device)
        self.length = 0

    @property
    def batch(self) -> int:
        return self.valid_BS.shape[0]

    def step(self, mask_BT: torch.Tensor) -> CacheStep:
        """Register T new columns; `mask_BT` is True for real tokens, False for (left) padding."""
        B, T = mask_BT.shape
        start, end = self.length, self.length + T
        if self.batch != B:
            raise ValueError(f"the cache holds {self.batch} rows; this step has {B}")
        if end > self.capacity:
            raise ValueError(f"KV cache full: it holds {self.capacity} tokens, this step needs {end}")
        mask_BT = mask_BT.to(self.valid_BS.device)
        causal = start == 0 and bool(mask_BT.all())
        self.valid_BS[:, start:end] = mask_BT
        real_BT = mask_BT.long()
        positions_BT = (self.next_pos_B[:, None] + real_BT.cumsum(1) - 1).clamp_min(0)
        self.next_pos_B = self.next_pos_B + real_BT.sum(1)
        self.length = end
        cols_S = torch.arange(end, device=mask_BT.device)
        query_T = torch.arange(start, end, device=mask_BT.device)
        seen_BTS = self.valid_BS[:, None, :end] & (cols_S[None, :] <= query_T[:, None])
        seen_BTS = seen_BTS | (cols_S[None, :] == query_T[:, None])  # a padding query sees itself
        return CacheStep(positions_BT, max(1, int(self.next_pos_B.max())), seen_BTS[:, None], causal)

    def select(self, rows_B: torch.Tensor) -> None:
        """Keep only these batch rows (finished rows leave the batch)."""
        rows_B = rows_B.to(self.valid_BS.device)
        self.valid_BS = self.valid_BS[rows_B]
        self.next_pos_B = self.next_pos_B[rows_B]
        for layer in self.layers:
            layer.select(rows_B)
