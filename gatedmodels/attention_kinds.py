"""Attention kinds: the softmax baseline and the attention-sink remedies, one module each, and
the one registry `ATTENTION_KINDS` that maps `AttentionConfig.kind` to a module.

Every kind maps per-head queries, keys and values (after QK-norm, the G2/G3/G4 gates and RoPE) to
the per-head output that gate G1 then sees. Its `forward` is the training path; `explicit` is the
probe path, which materialises the weights with the kind's own normalisation and records them:

- `softmax`: softmax(x) over the causal keys, x = q k^T / sqrt(d). Fused causal SDPA.
- `softmax1`: an extra logit fixed at 0 in the softmax ("softmax + 1", off-by-one), its value 0.
- `learned_sink`: an extra learned logit s_h per query head (gpt-oss's attention sinks), value 0:
  y = softmax([s_h, x]) [0; V] = SDPA(q, k, v) * sigmoid(LSE(x) - s_h).
- `key_bias`: an extra learned key k*_h per KV head, with a zero value (Gu et al. 2024's learnable
  key bias): its logit q k*_h / sqrt(d) depends on the query, not on any token.
- `softpick`: ReLU(e^x - 1) / (sum_j |e^x_j - 1| + eps) over the causal keys (Zuhri et al. 2025);
  the weights of a row sum to at most 1 and can all be 0.
- `sigmoid`: sigmoid(x + b) on every causal key, not normalised (Gu et al. 2024).
- `mla`: softmax as above, over the heads of multi-head latent attention, whose layer
  (`gatedmodels.mla.LatentAttention`) brings its own projections.

The three sink kinds run on the fused SDPA kernel, without the log-sum-exp: the sink becomes one
extra key slot at position 0 with a zero value, and a dummy query row in front keeps the mask the
plain causal one, `is_causal=True` on T + 1 positions (query i + 1 sees the slot and keys 0..i;
the dummy row's output is dropped). For `learned_sink` the slot's logit must not depend on the
query, so q and k gain one dimension: q's is s_h, the slot key's is 1/scale, every real key's is
0 (the real logits are unchanged, the slot's is exactly s_h; SDPA's backward gives s_h its
gradient). Cost: (T + 1)^2 instead of T^2 scores and one concatenation of q, k and v. softpick and
sigmoid attention have no fused kernel: they materialise the (B, H, T, T) scores in float32, in
training too (memory and time O(T^2) per head, like the probe path).

A sink slot's weight (the share of attention the slot absorbs) is recorded in `LayerProbe.sink`;
`LayerProbe.attn` holds the weights on the real keys only, so first-token attention and the
sink ratio read the same tensor for every kind.

Shape legend: B batch, H query heads, K kv heads, T queries, S keys, d head width.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .config import ModelConfig
from .kv_cache import CacheStep, KVLayerCache, LayerCache, NoCachePath
from .probes import LayerProbe


def _repeat_kv(x_BKTd: torch.Tensor, rep: int) -> torch.Tensor:
    return x_BKTd.repeat_interleave(rep, dim=1) if rep > 1 else x_BKTd


def _causal(T: int, device: torch.device) -> torch.Tensor:
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()


class AttentionKind(nn.Module):
    """Base: `forward(q, k, v)` the training path, `explicit(q, k, v, rec)` the probe path,
    `attend(q, k, v, mask)` the KV-cached generation path (queries of new tokens against every
    cached key, `mask` saying which each query sees), with `new_cache` its per-layer cache."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.name = cfg.attention.kind
        self.H, self.K, self.d = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.scale = 1.0 / math.sqrt(self.d)

    @classmethod
    def has_cache_path(cls) -> bool:
        """Whether the kind implements `attend` (KV-cached generation)."""
        return cls.attend is not AttentionKind.attend

    def new_cache(self, batch: int, capacity: int, dtype: torch.dtype, device: torch.device) -> LayerCache:
        """This layer's cache for `batch` rows of up to `capacity` tokens: keys and values (K heads
        of d) as `attend` receives them. A kind that caches something else overrides this."""
        if not self.has_cache_path():
            raise NoCachePath(f"attention kind {self.name!r} has no KV-cache path (AttentionKind.attend); it cannot generate")
        return KVLayerCache(batch, self.K, capacity, self.d, dtype, device)

    def attend(self, q_BHTd: torch.Tensor, k_BKSd: torch.Tensor, v_BKSd: torch.Tensor, step: CacheStep) -> torch.Tensor:
        """The output of T new queries over S cached keys; `step.mask_B1TS` is True where a query
        may attend (`step.bias(dtype)`: the same as an additive mask)."""
        raise NotImplementedError

    def reset_parameters(self) -> None:
        """Initialise the kind's own parameters (none for most kinds)."""

    def forward(self, q_BHTd: torch.Tensor, k_BKTd: torch.Tensor, v_BKTd: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def explicit(self, q_BHTd: torch.Tensor, k_BKTd: torch.Tensor, v_BKTd: torch.Tensor, rec: LayerProbe) -> torch.Tensor:
        raise NotImplementedError

    def _logits(self, q_BHTd: torch.Tensor, k_BKTd: torch.Tensor) -> torch.Tensor:
        """x = q k^T / sqrt(d) in float32, (B, H, T, S)."""
        k_BHTd = _repeat_kv(k_BKTd, self.H // self.K)
        return (q_BHTd @ k_BHTd.transpose(-1, -2)).float() / math.sqrt(self.d)


class Softmax(AttentionKind):
    """The baseline: causal softmax attention (fused SDPA; the probe path materialises it)."""

    def forward(self, q_BHTd: torch.Tensor, k_BKTd: torch.Tensor, v_BKTd: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q_BHTd, k_BKTd, v_BKTd, is_causal=True, enable_gqa=self.K != self.H)

    def attend(self, q_BHTd: torch.Tensor, k_BKSd: torch.Tensor, v_BKSd: torch.Tensor, step: CacheStep) -> torch.Tensor:
        return F.scaled_dot_product_attention(q_BHTd, k_BKSd, v_BKSd, attn_mask=step.bias(q_BHTd.dtype), enable_gqa=self.K != self.H)

    def explicit(self, q_BHTd: torch.Tensor, k_BKTd: torch.Tensor, v_BKTd: torch.Tensor, rec: LayerProbe) -> torch.Tensor:
        """softmax(q k^T / sqrt(d) + causal mask) materialised and recorded."""
        T = q_BHTd.shape[2]
        rep = self.H // self.K
        k_BHTd = k_BKTd.repeat_interleave(rep, dim=1)
        v_BHTd = v_BKTd.repeat_interleave(rep, dim=1)
        logits_BHTS = (q_BHTd @ k_BHTd.transpose(-1, -2)).float() / math.sqrt(self.d)
        causal = torch.ones(T, T, dtype=torch.bool, device=q_BHTd.device).tril()
        probs_BHTS = logits_BHTS.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        rec.attn = probs_BHTS.detach()
        return probs_BHTS.to(v_BHTd.dtype) @ v_BHTd


class SinkSlot(AttentionKind):
    """Softmax with one extra slot of zero value: its logit is `slot_logits` (B, H, T)."""

    def slot_logits(self, q_BHTd: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def slot_key(self, q_BHTd: torch.Tensor) -> torch.Tensor:
        """The slot as a key of the fused path, (B, K, 1, d)."""
        raise NotImplementedError

    def extend_query(self, q_BHTd: torch.Tensor) -> torch.Tensor:
        return q_BHTd

    def extend_key(self, k_BKTd: torch.Tensor) -> torch.Tensor:
        return k_BKTd

    def forward(self, q_BHTd: torch.Tensor, k_BKTd: torch.Tensor, v_BKTd: torch.Tensor) -> torch.Tensor:
        B, _, T, _ = q_BHTd.shape
        q_ext = self.extend_query(q_BHTd)
        k_ext = self.extend_key(k_BKTd)
        dummy_q = q_ext.new_zeros(B, self.H, 1, q_ext.shape[-1])
        q_ext = torch.cat([dummy_q, q_ext], dim=2)
        k_ext = torch.cat([self.slot_key(q_BHTd).to(k_ext.dtype), k_ext], dim=2)
        v_ext = torch.cat([v_BKTd.new_zeros(B, self.K, 1, self.d), v_BKTd], dim=2)
        y = F.scaled_dot_product_attention(q_ext, k_ext, v_ext, is_causal=True, scale=self.scale, enable_gqa=self.K != self.H)
        return y[:, :, 1:]

    def attend(self, q_BHTd: torch.Tensor, k_BKSd: torch.Tensor, v_BKSd: torch.Tensor, step: CacheStep) -> torch.Tensor:
        """The slot is key 0 of every query, seen by all: no dummy query is needed with a mask."""
        B = q_BHTd.shape[0]
        k_ext = self.extend_key(k_BKSd)
        k_ext = torch.cat([self.slot_key(q_BHTd).to(k_ext.dtype), k_ext], dim=2)
        v_ext = torch.cat([v_BKSd.new_zeros(B, self.K, 1, self.d), v_BKSd], dim=2)
        bias = step.bias(q_BHTd.dtype)
        mask_ext = torch.cat([bias.new_zeros(*bias.shape[:3], 1), bias], dim=-1)
        q_ext = self.extend_query(q_BHTd)
        return F.scaled_dot_product_attention(q_ext, k_ext, v_ext, attn_mask=mask_ext, scale=self.scale, enable_gqa=self.K != self.H)

    def explicit(self, q_BHTd: torch.Tensor, k_BKTd: torch.Tensor, v_BKTd: torch.Tensor, rec: LayerProbe) -> torch.Tensor:
        T = q_BHTd.shape[2]
        logits_BHTS = self._logits(q_BHTd, k_BKTd).masked_fill(~_causal(T, q_BHTd.device), float("-inf"))
        slot_BHT1 = self.slot_logits(q_BHTd).float().unsqueeze(-1)
        probs = torch.cat([slot_BHT1, logits_BHTS], dim=-1).softmax(dim=-1)
        probs_BHTS = probs[..., 1:]
        rec.attn = probs_BHTS.detach()
        rec.sink = probs[..., 0].detach()
        v_BHTd = _repeat_kv(v_BKTd, self.H // self.K)
        return probs_BHTS.to(v_BHTd.dtype) @ v_BHTd


class Softmax1(SinkSlot):
    """softmax + 1: an extra logit fixed at 0 (no parameters)."""

    def slot_logits(self, q_BHTd: torch.Tensor) -> torch.Tensor:
        return q_BHTd.new_zeros(q_BHTd.shape[:3])

    def slot_key(self, q_BHTd: torch.Tensor) -> torch.Tensor:
        return q_BHTd.new_zeros(q_BHTd.shape[0], self.K, 1, self.d)


class LearnedSink(SinkSlot):
    """A learned sink logit per query head (gpt-oss): parameter `sinks` (H,)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        self.sink_init = cfg.attention.sink_init
        self.sinks = nn.Parameter(torch.full((self.H,), self.sink_init))

    @torch.no_grad()
    def reset_parameters(self) -> None:
        self.sinks.fill_(self.sink_init)

    def slot_logits(self, q_BHTd: torch.Tensor) -> torch.Tensor:
        return self.sinks.to(q_BHTd.dtype)[None, :, None].expand(q_BHTd.shape[:3])

    def extend_query(self, q_BHTd: torch.Tensor) -> torch.Tensor:
        B, H, T, _ = q_BHTd.shape
        s = self.sinks.to(q_BHTd.dtype)[None, :, None, None].expand(B, H, T, 1)
        return torch.cat([q_BHTd, s], dim=-1)

    def extend_key(self, k_BKTd: torch.Tensor) -> torch.Tensor:
        return torch.cat([k_BKTd, k_BKTd.new_zeros(*k_BKTd.shape[:3], 1)], dim=-1)

    def slot_key(self, q_BHTd: torch.Tensor) -> torch.Tensor:
        key = q_BHTd.new_zeros(q_BHTd.shape[0], self.K, 1, self.d + 1)
        key[..., -1] = 1.0 / self.scale
        return key


class KeyBias(SinkSlot):
    """A learned key k*_h per KV head with a zero value (Gu et al. 2024): parameter `sink_keys` (K, d)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        self.sink_keys = nn.Parameter(torch.zeros(self.K, self.d))

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Zero: the slot starts as softmax1's zero logit and learns which queries it absorbs."""
        self.sink_keys.zero_()

    def slot_logits(self, q_BHTd: torch.Tensor) -> torch.Tensor:
        k_Hd = _repeat_kv(self.sink_keys.to(q_BHTd.dtype)[None, :, None, :], self.H // self.K)
        return (q_BHTd * k_Hd).sum(-1) * self.scale

    def slot_key(self, q_BHTd: torch.Tensor) -> torch.Tensor:
        return self.sink_keys.to(q_BHTd.dtype)[None, :, None, :].expand(q_BHTd.shape[0], -1, -1, -1)


class Explicit(AttentionKind):
    """Kinds with no fused kernel: weights from `weights(logits, causal)`, in training too."""

    def weights(self, logits_BHTS: torch.Tensor, causal_TS: torch.Tensor) -> torch.Tensor:
        """The weights of the keys `causal_TS` allows (a (T, S) causal mask in training, the
        cache's (B, 1, T, S) mask in generation); the others get weight 0."""
        raise NotImplementedError

    def _attend(self, q_BHTd: torch.Tensor, k_BKTd: torch.Tensor, v_BKTd: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        T = q_BHTd.shape[2]
        w_BHTS = self.weights(self._logits(q_BHTd, k_BKTd), _causal(T, q_BHTd.device))
        v_BHTd = _repeat_kv(v_BKTd, self.H // self.K)
        return w_BHTS.to(v_BHTd.dtype) @ v_BHTd, w_BHTS

    def forward(self, q_BHTd: torch.Tensor, k_BKTd: torch.Tensor, v_BKTd: torch.Tensor) -> torch.Tensor:
        return self._attend(q_BHTd, k_BKTd, v_BKTd)[0]

    def attend(self, q_BHTd: torch.Tensor, k_BKSd: torch.Tensor, v_BKSd: torch.Tensor, step: CacheStep) -> torch.Tensor:
        w_BHTS = self.weights(self._logits(q_BHTd, k_BKSd), step.mask_B1TS)
        v_BHSd = _repeat_kv(v_BKSd, self.H // self.K)
        return w_BHTS.to(v_BHSd.dtype) @ v_BHSd

    def explicit(self, q_BHTd: torch.Tensor, k_BKTd: torch.Tensor, v_BKTd: torch.Tensor, rec: LayerProbe) -> torch.Tensor:
        y, w_BHTS = self._attend(q_BHTd, k_BKTd, v_BKTd)
        rec.attn = w_BHTS.detach()
        return y


class Softpick(Explicit):
    """ReLU(e^x - 1) / (sum_j |e^x_j - 1| + eps), rectified and not forced to sum to 1."""

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        self.eps = cfg.attention.softpick_eps

    def weights(self, logits_BHTS: torch.Tensor, causal_TS: torch.Tensor) -> torch.Tensor:
        # A masked logit set to 0 adds e^0 - 1 = 0 to numerator and denominator. Scaling both by
        # e^-m, m = max(0, row max), keeps every exponent <= 0 and leaves the weights unchanged.
        x = logits_BHTS.masked_fill(~causal_TS, 0.0)
        m = x.detach().amax(dim=-1, keepdim=True).clamp_min(0.0)
        e = torch.exp(x - m) - torch.exp(-m)
        return F.relu(e) / (e.abs().sum(dim=-1, keepdim=True) + self.eps * torch.exp(-m))


class SigmoidAttention(Explicit):
    """sigmoid(x + b) on every causal key, not normalised (Gu et al. 2024)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        self.bias = cfg.attention.sigmoid_bias

    def weights(self, logits_BHTS: torch.Tensor, causal_TS: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(logits_BHTS + self.bias) * causal_TS


class LatentSoftmax(Softmax):
    """Softmax over MLA's heads (`gatedmodels.mla`): a key and a value per query head, queries and
    keys head_dim + mla_rope_dim wide (the scale is 1 / sqrt of that), values head_dim wide."""

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        self.K = self.H
        self.d = cfg.head_dim + cfg.attention.mla_rope_dim
        self.scale = 1.0 / math.sqrt(self.d)

    @classmethod
    def has_cache_path(cls) -> bool:
        """Softmax's `attend` would serve, but MLA's layer caches no latent yet (`gatedmodels.mla`)."""
        return False


#: the registry: attention kind -> module factory
ATTENTION_KINDS: dict[str, Callable[[ModelConfig], AttentionKind]] = {
    "softmax": Softmax,
    "softmax1": Softmax1,
    "learned_sink": LearnedSink,
    "key_bias": KeyBias,
    "softpick": Softpick,
    "sigmoid": SigmoidAttention,
    "mla": LatentSoftmax,
}


def build_attention_kind(cfg: ModelConfig) -> AttentionKind:
    return ATTENTION_KINDS[cfg.attention.kind](cfg)
