"""The decoder: `GatedTransformer(cfg)(input_ids) -> logits`.

Shape legend: B batch, T time, D d_model, H query heads, K kv heads, d head width,
S gate score features, V vocabulary.

Block: x + Attn(RMSNorm(x)), then x + FFN(RMSNorm(x)); FFN is SwiGLU or MoE.
Attention: one fused projection X [Wq | Wk | Wv | Wg] -> per-head q, k, v (+ gate scores),
QK-norm, gates G4/G3/G2, RoPE, causal attention of `cfg.attention.kind` (softmax: fused SDPA;
see `attention_kinds`), gate G1, o_proj, gate G5. `attention.kind: mla` swaps in multi-head
latent attention (`gatedmodels.mla`), with the same gate slots.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from .attention_kinds import build_attention_kind
from .config import ModelConfig, RopeConfig
from .costs import gate_score_features
from .gates import build_gate_slots
from .kv_cache import CacheStep, KVCache, LayerCache
from .layers import ModuleList, MoE, RMSNorm, Rotary, SwiGLU
from .mla import LatentAttention
from .probes import LayerProbe, ProbeResult


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.H, self.K, self.d = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.S = gate_score_features(cfg)
        self.split = [cfg.q_dim, cfg.kv_dim, cfg.kv_dim, self.S]
        self.wqkv = nn.Linear(cfg.d_model, sum(self.split), bias=False)
        self.wo = nn.Linear(cfg.q_dim, cfg.d_model, bias=False)
        self.q_norm = RMSNorm(self.d, cfg.norm_eps) if cfg.qk_norm else nn.Identity()
        self.k_norm = RMSNorm(self.d, cfg.norm_eps) if cfg.qk_norm else nn.Identity()
        self.rotary = Rotary(self.d, cfg.rope) if cfg.position_encoding == "rope" else nn.Identity()
        self.gates = build_gate_slots(cfg)
        self.kernel = build_attention_kind(cfg)
        """softmax (fused SDPA) or an attention-sink remedy; its parameters sit under `kernel.`."""

    def forward(
        self, x_BTD: torch.Tensor, rec: LayerProbe | None = None, cache: LayerCache | None = None, step: CacheStep | None = None
    ) -> torch.Tensor:
        """With `cache` and `step` (generation): the new tokens' keys and values join the cache
        and the queries attend over all of it (`AttentionKind.attend`)."""
        B, T, D = x_BTD.shape
        gates = self.gates
        q, k, v, scores_BTS = self.wqkv(x_BTD).split(self.split, dim=-1)
        q_BTHd = self.q_norm(q.unflatten(-1, (self.H, self.d)))
        k_BTKd = self.k_norm(k.unflatten(-1, (self.K, self.d)))
        v_BTKd = v.unflatten(-1, (self.K, self.d))
        q_BTHd = gates["G4"](q_BTHd, scores_BTS, rec)
        k_BTKd = gates["G3"](k_BTKd, scores_BTS, rec)
        v_BTKd = gates["G2"](v_BTKd, scores_BTS, rec)
        rotate = (lambda x: self.rotary(x, step)) if step is not None and isinstance(self.rotary, Rotary) else self.rotary
        q_BHTd = rotate(q_BTHd).transpose(1, 2)
        k_BKTd = rotate(k_BTKd).transpose(1, 2)
        v_BKTd = v_BTKd.transpose(1, 2)
        if cache is not None and step is not None:
            k_BKSd, v_BKSd = cache.append(k_BKTd, v_BKTd)
            # a first step without padding is a plain causal pass: the kind's fused training path
            y_BHTd = self.kernel(q_BHTd, k_BKTd, v_BKTd) if step.causal else self.kernel.attend(q_BHTd, k_BKSd, v_BKSd, step)
        elif rec is None:
            y_BHTd = self.kernel(q_BHTd, k_BKTd, v_BKTd)
        else:
            y_BHTd = self.kernel.explicit(q_BHTd, k_BKTd, v_BKTd, rec)
            rec.values = v_BTKd.detach().float()
        y_BTHd = gates["G1"](y_BHTd.transpose(1, 2), scores_BTS, rec)
        out_BTD = self.wo(y_BTHd.reshape(B, T, self.H * self.d))
        return gates["G5"](out_BTD.unsqueeze(2), scores_BTS, rec).squeeze(2)


ATTENTION_LAYERS: dict[str, type[LatentAttention]] = {"mla": LatentAttention}
"""Attention kinds with projections of their own (the others are `Attention` with another kernel)."""


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn: Attention | LatentAttention = ATTENTION_LAYERS.get(cfg.attention.kind, Attention)(cfg)
        self.ffn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.ffn = MoE(cfg) if cfg.moe.n_experts else SwiGLU(cfg.d_model, cfg.ffn_dim)

    def forward(
        self, x_BTD: torch.Tensor, rec: LayerProbe | None = None, cache: LayerCache | None = None, step: CacheStep | None = None
    ) -> torch.Tensor:
        x_BTD = x_BTD + self.attn(self.attn_norm(x_BTD), rec, cache, step)
        x_BTD = x_BTD + self.ffn(self.ffn_norm(x_BTD))
        if rec is not None:
            rec.output = x_BTD.detach().float()
        return x_BTD


class GatedTransformer(nn.Module):
    """Decoder-only transformer with one gated-attention variant (see `GateConfig`)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_embed = nn.Embedding(cfg.max_seq_len, cfg.d_model) if cfg.position_encoding == "learned" else None
        self.blocks = ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.lm_head = None if cfg.tie_embeddings else nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.checkpoint_blocks = False
        """Recompute each block's activations in backward (activation checkpointing) when training."""
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Normal(0, init_std) for linear and embedding weights; gate rows use gate.init_std."""
        if self.embed.weight.is_meta:
            return
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=self.cfg.init_std)
        for block in self.blocks:
            block.attn.kernel.reset_parameters()
            S = block.attn.S
            if S:  # an init-neutral activation (2sigmoid) starts its rows at zero: the gate is exactly 1
                nn.init.normal_(block.attn.wqkv.weight[-S:], std=self.cfg.gate.init_std if self.cfg.gate.uses_init_std else 0.0)

    def forward(self, input_ids_BT: torch.Tensor, *, probe: ProbeResult | None = None) -> torch.Tensor:
        """Logits (B, T, V). With `probe`, each layer appends what it saw (explicit attention)."""
        return self.head(self.hidden(input_ids_BT, probe=probe))

    def hidden(
        self,
        input_ids_BT: torch.Tensor,
        *,
        probe: ProbeResult | None = None,
        cache: KVCache | None = None,
        mask_BT: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The final-normed hidden states (B, T, D) that `head` turns into logits. With `cache`
        (generation), `input_ids_BT` are the new tokens of each row, left-padded where `mask_BT`
        is False; they join the cache (see `gatedmodels.kv_cache`)."""
        step = None
        if cache is not None:
            if probe is not None:
                raise ValueError("a probe pass runs without a KV cache")
            step = cache.step(mask_BT if mask_BT is not None else torch.ones_like(input_ids_BT, dtype=torch.bool))
        x_BTD = self.embed(input_ids_BT)
        if self.pos_embed is not None:
            n = step.n_positions if step is not None else input_ids_BT.shape[1]
            if self.cfg.max_seq_len < n:
                raise ValueError(f"sequence length {n} exceeds max_seq_len {self.cfg.max_seq_len} of learned positions")
            x_BTD = x_BTD + (self.pos_embed.weight[step.positions_BT] if step is not None else self.pos_embed.weight[:n])
        recompute = self.checkpoint_blocks and self.training and probe is None and cache is None and torch.is_grad_enabled()
        for i, block in enumerate(self.blocks):
            rec = None
            if probe is not None:
                rec = LayerProbe()
                probe.layers.append(rec)
            if recompute:
                x_BTD = checkpoint(block, x_BTD, None, use_reentrant=False)
            else:
                x_BTD = block(x_BTD, rec, cache.layers[i] if cache is not None else None, step)
        return self.norm(x_BTD)

    def head(self, x_D: torch.Tensor) -> torch.Tensor:
        """Logits of hidden states (any leading shape): the LM head, or the tied embedding."""
        return self.lm_head(x_D) if self.lm_head is not None else F.linear(x_D, self.embed.weight)

    def new_cache(self, batch: int, capacity: int) -> KVCache:
        """An empty KV cache for `batch` rows of up to `capacity` tokens (prompt + generation).
        Raises `kv_cache.NoCachePath` naming the attention kind when it has no cache path."""
        w = self.embed.weight
        layers = [block.attn.kernel.new_cache(batch, capacity, w.dtype, w.device) for block in self.blocks]
        return KVCache(layers, batch, capacity, w.device)

    @torch.no_grad()
    def probe(self, input_ids_BT: torch.Tensor) -> tuple[torch.Tensor, ProbeResult]:
        """An evaluation pass that also returns per-layer attention, values, gates and outputs."""
        result = ProbeResult()
        logits = self(input_ids_BT, probe=result)
        return logits, result

    def aux_loss(self) -> torch.Tensor:
        """Sum of the MoE load-balancing losses of the last forward, times `moe.aux_loss_coef`."""
        losses = [b.ffn.aux_loss for b in self.blocks if isinstance(b.ffn, MoE)]
        if not losses:
            return torch.zeros((), device=self.embed.weight.device)
        return self.cfg.moe.aux_loss_coef * torch.stack(losses).sum()

    def num_params(self, *, exclude_embeddings: bool = False) -> int:
        n = sum(p.numel() for p in self.parameters())
        if exclude_embeddings:
            n -= self.embed.weight.numel()
            if self.pos_embed is not None:
                n -= self.pos_embed.weight.numel()
        return n

    def gate_params(self) -> int:
        """Parameters the gate adds: its rows of the fused projections plus gate-module parameters."""
        n = 0
        for block in self.blocks:
            n += block.attn.S * block.attn.wqkv.in_features
            n += sum(p.numel() for p in block.attn.gates.parameters())
        return n

    def attention_params(self) -> int:
        """Parameters the attention kind adds (learned_sink: a logit per head; key_bias: a key per KV head)."""
        return sum(p.numel() for block in self.blocks for p in block.attn.kernel.parameters())

    def active_params(self) -> int:
        """Parameters used per token (MoE: only top_k of n_experts), for FLOP estimates."""
        n = self.num_params(exclude_embeddings=True)
        m = self.cfg.moe
        if m.n_experts:
            per_expert = 3 * self.cfg.d_model * m.expert_dim
            n -= self.cfg.n_layers * (m.n_experts - m.top_k) * per_expert
        return n


def build_meta(cfg: ModelConfig) -> GatedTransformer:
    """Build on the meta device: counts parameters of any size without allocating memory."""
    with torch.device("meta"):
        return GatedTransformer(cfg)


@contextlib.contextmanager
def rope_override(model: GatedTransformer, rope: RopeConfig) -> Iterator[GatedTransformer]:
    """Evaluate with other RoPE settings (a raised base, or YaRN scaling for contexts beyond the
    training length), then restore the trained ones. RoPE holds no parameters, so the swap is
    free; models without RoPE are left alone."""
    saved = []
    for block in model.blocks:
        attn = block.attn
        if isinstance(attn.rotary, Rotary):
            saved.append((attn, attn.rotary))
            width = 2 * attn.rotary.inv_freq.numel()  # head_dim, or MLA's decoupled RoPE width
            attn.rotary = Rotary(width, rope).to(attn.rotary.inv_freq.device)
    try:
        yield model
    finally:
        for attn, rotary in saved:
            attn.rotary = rotary
