"""Multi-head latent attention (DeepSeek-V2/V3, "MLA"), with gatesweep's five gate slots.

Kimi-K3 ships it with a sigmoid output gate before o_proj, which is G1 here; every other
position, granularity and activation composes too (`attention.kind: mla`, REFERENCE §10).

Per token, from the block's normalised input X (shapes per layer; H heads, d = head_dim, r =
mla_rope_dim, R_q = mla_q_rank, R = mla_kv_rank):

    [c_Q | c_KV | k_R | scores] = X W_a       one fused down projection `wqkv` (sglang fuses
                                              Kimi-K3's gate into this GEMM too)
    q   = RMSNorm(c_Q) W_qb                   (H, d + r) per head [q_nope | q_rope]; without a
                                              query latent (R_q = 0), c_Q is q itself
    [k_nope | v] = RMSNorm(c_KV) W_kvb        (H, d + d) per head
    k   = [k_nope | k_R]                      the RoPE key k_R (r wide) is shared by every head
    G4(q), G3(k), G2(v), then RoPE on the last r dims of q and k, softmax attention with scale
    1 / sqrt(d + r), G1 on the (H, d) output, o_proj, G5.

The rows follow transformers' `DeepseekV3Attention` (q_a_proj / kv_a_proj_with_mqa /
q_b_proj / kv_b_proj), so its weights copy across: `wqkv` = [q_a_proj | kv_a_proj_with_mqa |
gate rows] (or [q_proj | ...] without a query latent), `wq_b` = q_b_proj, `wkv_b` = kv_b_proj,
`q_norm` = q_a_layernorm, `kv_norm` = kv_a_layernorm, `wo` = o_proj. RoPE is rotate-half
(`rope_interleave: false`; DeepSeek-V3's interleaved pairs are the same function with the RoPE
rows of q_b_proj and kv_a_proj_with_mqa permuted). tests/gatedmodels/test_mla.py checks both.

A gate at G3 or G4 acts per head on [nope | rope] before RoPE, like the other positions do.
What MLA saves at inference is the cache: c_KV and k_R per token (R + r numbers) instead of
2·H·d. This module has no cache (generation re-runs the prefix); the latent KV-cache path is a
follow-up to gatesweep's KV cache.

Shape legend: B batch, T time, D d_model, H heads, d head_dim, r RoPE width, e = d + r.
"""

from __future__ import annotations

import torch
from torch import nn

from .attention_kinds import build_attention_kind
from .config import ModelConfig
from .costs import gate_score_features
from .gates import build_gate_slots
from .kv_cache import CacheStep, LayerCache
from .layers import RMSNorm, Rotary
from .probes import LayerProbe


class LatentAttention(nn.Module):
    """The attention layer of `attention.kind: mla` (see the module docstring)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        a = cfg.attention
        self.H, self.d, self.r = cfg.n_heads, cfg.head_dim, a.mla_rope_dim
        e = self.d + self.r
        self.S = gate_score_features(cfg)
        self.split = [a.mla_q_rank or self.H * e, a.mla_kv_rank, self.r, self.S]
        self.wqkv = nn.Linear(cfg.d_model, sum(self.split), bias=False)
        """The fused down projection [W_qa (or W_q) | W_kva | W_kR | W_g]; the gate rows last, as in `Attention`."""
        self.q_norm: nn.Module = RMSNorm(a.mla_q_rank, cfg.norm_eps) if a.mla_q_rank else nn.Identity()
        self.wq_b: nn.Module = nn.Linear(a.mla_q_rank, self.H * e, bias=False) if a.mla_q_rank else nn.Identity()
        self.kv_norm = RMSNorm(a.mla_kv_rank, cfg.norm_eps)
        self.wkv_b = nn.Linear(a.mla_kv_rank, self.H * 2 * self.d, bias=False)
        self.wo = nn.Linear(self.H * self.d, cfg.d_model, bias=False)
        rope = cfg.position_encoding == "rope" and self.r > 0
        self.rotary: nn.Module = Rotary(self.r, cfg.rope) if rope else nn.Identity()
        self.gates = build_gate_slots(cfg)
        self.kernel = build_attention_kind(cfg)

    def _rope(self, x_BTHe: torch.Tensor) -> torch.Tensor:
        """RoPE on the last r dimensions (the decoupled part), the first d unchanged."""
        nope, pos = x_BTHe.split([self.d, self.r], dim=-1)
        return torch.cat([nope, self.rotary(pos)], dim=-1)

    def forward(
        self, x_BTD: torch.Tensor, rec: LayerProbe | None = None, cache: LayerCache | None = None, step: CacheStep | None = None
    ) -> torch.Tensor:
        """`cache`/`step`: the block's generation interface; MLA has no cache path yet (its kind is
        not in `KV_CACHE_KINDS`, so a generating trial is refused at validation), so a cache here
        is a programming error, not a silent full recompute."""
        if cache is not None or step is not None:
            raise NotImplementedError("multi-head latent attention has no KV-cache path yet (KV_CACHE_KINDS)")
        B, T, _ = x_BTD.shape
        gates = self.gates
        c_q, c_kv, k_rope_BTr, scores_BTS = self.wqkv(x_BTD).split(self.split, dim=-1)
        q_BTHe = self.wq_b(self.q_norm(c_q)).unflatten(-1, (self.H, self.d + self.r))
        k_nope_BTHd, v_BTHd = self.wkv_b(self.kv_norm(c_kv)).unflatten(-1, (self.H, 2 * self.d)).split([self.d, self.d], dim=-1)
        k_BTHe = torch.cat([k_nope_BTHd, k_rope_BTr.unsqueeze(2).expand(B, T, self.H, self.r)], dim=-1)
        q_BTHe = gates["G4"](q_BTHe, scores_BTS, rec)
        k_BTHe = gates["G3"](k_BTHe, scores_BTS, rec)
        v_BTHd = gates["G2"](v_BTHd, scores_BTS, rec)
        q_BHTe = self._rope(q_BTHe).transpose(1, 2)
        k_BHTe = self._rope(k_BTHe).transpose(1, 2)
        v_BHTd = v_BTHd.transpose(1, 2)
        if rec is None:
            y_BHTd = self.kernel(q_BHTe, k_BHTe, v_BHTd)
        else:
            y_BHTd = self.kernel.explicit(q_BHTe, k_BHTe, v_BHTd, rec)
            rec.values = v_BTHd.detach().float()
        y_BTHd = gates["G1"](y_BHTd.transpose(1, 2), scores_BTS, rec)
        out_BTD = self.wo(y_BTHd.reshape(B, T, self.H * self.d))
        return gates["G5"](out_BTD.unsqueeze(2), scores_BTS, rec).squeeze(2)
