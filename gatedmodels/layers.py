"""Building blocks: RMSNorm, rotary embeddings with YaRN, SwiGLU and mixture-of-experts FFNs.

Shape legend: B batch, T time, H heads, d head width, D d_model, F FFN hidden, E experts,
N tokens (B*T), K top-k.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

import torch
import torch.nn.functional as F
from torch import nn

from .config import ModelConfig, RopeConfig
from .kv_cache import CacheStep

M = TypeVar("M", bound=nn.Module)


class ModuleList(nn.ModuleList, Generic[M]):
    """`nn.ModuleList` of one module type, so that iterating and indexing it give that type
    (torch's is not generic). Only the annotations differ; it behaves as `nn.ModuleList`."""

    if TYPE_CHECKING:

        def __init__(self, modules: Iterable[M]) -> None: ...
        def __iter__(self) -> Iterator[M]: ...
        @overload
        def __getitem__(self, idx: slice) -> ModuleList[M]: ...
        @overload
        def __getitem__(self, idx: int) -> M: ...
        def __getitem__(self, idx: int | slice) -> M | ModuleList[M]: ...


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def rope_frequencies(head_dim: int, cfg: RopeConfig) -> tuple[torch.Tensor, float]:
    """Inverse frequencies (head_dim/2,) and the attention scale for cos/sin.

    YaRN follows Peng et al. 2023 ("NTK-by-parts" + temperature), as in HF transformers'
    `_compute_yarn_parameters`: dimensions that rotate more than `beta_fast` times over the
    original context keep their frequency, those rotating fewer than `beta_slow` times are
    interpolated by `factor`, a linear ramp in between; cos/sin are scaled by 0.1 ln(factor) + 1.
    """
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim
    inv_freq = 1.0 / (cfg.base**exponents)
    if cfg.scaling == "none" or cfg.factor == 1.0:
        return inv_freq.float(), 1.0

    def correction_dim(rotations: float) -> float:
        return head_dim * math.log(cfg.original_max_len / (rotations * 2 * math.pi)) / (2 * math.log(cfg.base))

    low = max(math.floor(correction_dim(cfg.beta_fast)), 0)
    high: float = min(math.ceil(correction_dim(cfg.beta_slow)), head_dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(head_dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    extrapolate = 1 - ramp  # 1: keep the original frequency, 0: interpolate
    inv_freq = inv_freq / cfg.factor * (1 - extrapolate) + inv_freq * extrapolate
    return inv_freq.float(), 0.1 * math.log(cfg.factor) + 1.0


class Rotary(nn.Module):
    """Rotary position embedding applied to (B, T, H, d) tensors, rotate-half convention."""

    inv_freq: torch.Tensor  # a buffer, registered in __init__

    def __init__(self, head_dim: int, cfg: RopeConfig):
        super().__init__()
        inv_freq, self.scale = rope_frequencies(head_dim, cfg)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self._cache: tuple[int, torch.device, torch.dtype, torch.Tensor, torch.Tensor] | None = None

    def tables(self, T: int, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        c = self._cache
        if c is None or c[0] < T or c[1] != device or c[2] != dtype:
            n = max(T, 256)
            t = torch.arange(n, device=device, dtype=torch.float32)
            freqs = torch.outer(t, self.inv_freq.to(device))
            emb = torch.cat([freqs, freqs], dim=-1)  # (n, d)
            cos = (emb.cos() * self.scale).to(dtype)[:, None, :]  # (n, 1, d) broadcasts over heads
            sin = (emb.sin() * self.scale).to(dtype)[:, None, :]
            self._cache = c = (n, device, dtype, cos, sin)
        return c[3][:T], c[4][:T]

    def forward(self, x_BTHd: torch.Tensor, step: CacheStep | None = None) -> torch.Tensor:
        """Rotate the token at time t by t; in a KV-cached step (left-padded rows), each token by
        its own row's position, `step.positions_BT`."""
        if step is None:
            cos, sin = self.tables(x_BTHd.shape[1], x_BTHd.device, x_BTHd.dtype)
        else:
            cos, sin = self.tables(step.n_positions, x_BTHd.device, x_BTHd.dtype)
            cos, sin = cos[step.positions_BT], sin[step.positions_BT]  # (B, T, 1, d)
        x1, x2 = x_BTHd.chunk(2, dim=-1)
        rotated = torch.cat([-x2, x1], dim=-1)
        return x_BTHd * cos + rotated * sin


class SwiGLU(nn.Module):
    """silu(x W1) * (x W3), then W2. W1 and W3 are fused into one projection."""

    def __init__(self, d_model: int, hidden: int):
        super().__init__()
        self.w13 = nn.Linear(d_model, 2 * hidden, bias=False)
        self.w2 = nn.Linear(hidden, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.w13(x).chunk(2, dim=-1)
        return self.w2(F.silu(a) * b)


class _ContiguousGrad(torch.autograd.Function):
    """Identity whose backward hands on a contiguous gradient (`torch._grouped_mm`'s backward
    rejects the expanded gradients that e.g. `.sum()` produces)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad.contiguous()


class MoE(nn.Module):
    """Top-k routed SwiGLU experts with softmax routing (Qwen3-MoE) and a Switch-style
    load-balancing loss, E * sum_i f_i * P_i (Fedus et al. 2021), kept in `self.aux_loss`.

    `impl="grouped"` sorts the N*K (token, expert) assignments by expert and runs
    all experts at once over their stacked weights, then scatters the weighted outputs back: no
    Python loop over experts, no capacity limit, no token dropped. On CUDA it is two
    `torch._grouped_mm` calls (segments given by the per-expert counts; needs 16-byte aligned
    widths, e.g. d_model and expert_dim multiples of 8 in bf16); elsewhere the sorted rows are
    padded per expert to the largest count and run as two `bmm`s (the padding is the imbalance
    of the routing). `impl="loop"` is the reference: one gather, SwiGLU and `index_add_` per
    expert. They agree to fp32 rounding (tested). `impl="auto"` (the default) is `grouped` where
    `torch._grouped_mm` runs and `loop` elsewhere: on a CPU the loop's matmuls are already about
    70% of its time, and the padded `bmm`, its padding and its scatters cost more than the loop's
    Python overhead (`benchmarks/moe_grouped.py`).
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        m = cfg.moe
        self.top_k, self.norm_topk, self.impl = m.top_k, m.norm_topk_prob, m.impl
        self.router = nn.Linear(cfg.d_model, m.n_experts, bias=False)
        self.experts = nn.ModuleList(SwiGLU(cfg.d_model, m.expert_dim) for _ in range(m.n_experts))
        self.hidden = m.expert_dim
        self.aux_loss = torch.zeros(())

    def _swiglus(self) -> list[SwiGLU]:
        return [e for e in self.experts if isinstance(e, SwiGLU)]

    def forward(self, x_BTD: torch.Tensor) -> torch.Tensor:
        B, T, D = x_BTD.shape
        x_ND = x_BTD.reshape(-1, D)
        probs_NE = self.router(x_ND).float().softmax(dim=-1)
        weights_NK, experts_NK = probs_NE.topk(self.top_k, dim=-1)
        if self.norm_topk:
            weights_NK = weights_NK / weights_NK.sum(dim=-1, keepdim=True)
        E = probs_NE.shape[-1]
        counts_E = torch.bincount(experts_NK.flatten(), minlength=E)
        self.aux_loss = E * (counts_E.to(probs_NE.dtype) / experts_NK.numel() * probs_NE.mean(dim=0)).sum()
        if self.impl == "grouped" or (self.impl == "auto" and self._grouped_mm_ok(x_ND)):
            out_ND = self._grouped(x_ND, weights_NK, experts_NK, counts_E)
        else:
            out_ND = self._loop(x_ND, weights_NK, experts_NK)
        return out_ND.view(B, T, D)

    def _grouped_mm_ok(self, x: torch.Tensor) -> bool:
        aligned = (x.shape[-1] * x.element_size()) % 16 == 0 and (self.hidden * x.element_size()) % 16 == 0
        return bool(x.is_cuda and hasattr(torch, "_grouped_mm") and aligned)

    def _grouped(self, x_ND: torch.Tensor, weights_NK: torch.Tensor, experts_NK: torch.Tensor, counts_E: torch.Tensor) -> torch.Tensor:
        K = experts_NK.shape[1]
        order_M = experts_NK.flatten().argsort(stable=True)  # M = N*K assignments, grouped by expert
        token_M = order_M // K
        w13_EDH = torch.stack([e.w13.weight for e in self._swiglus()]).transpose(1, 2)  # (E, D, 2·hidden)
        w2_EHD = torch.stack([e.w2.weight for e in self._swiglus()]).transpose(1, 2)  # (E, hidden, D)
        x_MD = x_ND[token_M]
        if self._grouped_mm_ok(x_ND):  # segments of the sorted rows, one per expert
            offs_E = counts_E.cumsum(0).to(torch.int32)
            h_MH = _ContiguousGrad.apply(torch._grouped_mm(x_MD, w13_EDH, offs=offs_E))
            a_MH, b_MH = h_MH.chunk(2, dim=-1)
            y_MD = _ContiguousGrad.apply(torch._grouped_mm((F.silu(a_MH) * b_MH).contiguous(), w2_EHD, offs=offs_E))
        else:  # CPU: rows padded per expert to the largest count, one batched matmul (torch._grouped_mm is ~30x slower there)
            expert_M = experts_NK.flatten()[order_M]
            pos_M = torch.arange(len(order_M), device=x_ND.device) - (counts_E.cumsum(0) - counts_E)[expert_M]
            x_ECD = x_ND.new_zeros(len(self.experts), int(counts_E.max()), x_ND.shape[-1])
            x_ECD[expert_M, pos_M] = x_MD
            a_ECH, b_ECH = torch.bmm(x_ECD, w13_EDH).chunk(2, dim=-1)
            y_MD = torch.bmm(F.silu(a_ECH) * b_ECH, w2_EHD)[expert_M, pos_M]
        y_MD = y_MD * weights_NK.flatten()[order_M, None].to(x_ND.dtype)
        return torch.zeros_like(x_ND).index_add_(0, token_M, y_MD)

    def _loop(self, x_ND: torch.Tensor, weights_NK: torch.Tensor, experts_NK: torch.Tensor) -> torch.Tensor:
        out_ND = torch.zeros_like(x_ND)
        for e, expert in enumerate(self._swiglus()):
            token_idx, slot = (experts_NK == e).nonzero(as_tuple=True)
            if token_idx.numel() == 0:
                continue
            y = expert(x_ND[token_idx]) * weights_NK[token_idx, slot, None].to(x_ND.dtype)
            out_ND.index_add_(0, token_idx, y)
        return out_ND
