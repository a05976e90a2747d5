"""Hugging Face -> gatesweep: a config.json and its tensors as a `ModelConfig` and a state dict, refusing what gatesweep cannot compute."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from gatedmodels import ModelConfig, MoEConfig, RopeConfig
from gatedmodels.typedconfig import ConfigError

from ..errors import InteropError
from . import laguna
from .fields import Fields
from .mappings import MAPPINGS, LayoutMapping, Read
from .to_hf import aux_coef_from_hf


def detect_layout(config: dict[str, Any], where: str) -> str:
    """The layout of an HF config.json, or InteropError naming what is unsupported."""
    mt = config.get("model_type")
    arch = config.get("architectures") or []
    arch_text = f" ({', '.join(map(str, arch))})" if isinstance(arch, list) and arch else ""
    if mt == "qwen3":
        flags = [k for k in ("headwise_attn_output_gate", "elementwise_attn_output_gate") if config.get(k)]
        if len(flags) == 2:
            raise InteropError(
                f"{where}: both headwise_attn_output_gate and elementwise_attn_output_gate are true; the paper's code takes one"
            )
        return "official" if flags or config.get("use_qk_norm") is False else "qwen3"
    if mt in ("qwen3_moe", "qwen3_next", "laguna"):
        return str(mt)
    supported = (
        "qwen3, qwen3_moe, qwen3_next (full-attention layers), laguna (full-attention layers), "
        "and qwen3 with headwise/elementwise_attn_output_gate (the paper's layout)"
    )
    raise InteropError(f"{where}: model_type {mt!r}{arch_text} is not supported; supported: {supported}")


def _rope_from_hf(f: Fields, layout: str, max_positions: int) -> RopeConfig:
    c = f.c
    params = c.get("rope_parameters") or {}
    if not isinstance(params, dict):
        raise f.fail("rope_parameters", f"got {params!r}; expected an object")
    if "full_attention" in params and isinstance(params["full_attention"], dict):
        params = params["full_attention"]  # nested by layer type: every layer here is full attention
    legacy = c.get("rope_scaling") or {}
    if not isinstance(legacy, dict):
        raise f.fail("rope_scaling", f"got {legacy!r}; expected an object or null")
    merged = {**params, **legacy}  # transformers lets rope_scaling win, as here
    kind = merged.get("rope_type", merged.get("type", "default"))
    base = merged.get("rope_theta", c.get("rope_theta", 10000.0))
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not base > 1:
        raise f.fail("rope_theta", f"got {base!r}; expected a number > 1")
    partial = merged.get("partial_rotary_factor", c.get("partial_rotary_factor", 0.25 if layout == "qwen3_next" else 1.0))
    if partial != 1.0:
        raise f.fail("partial_rotary_factor", f"got {partial!r}; gatesweep rotates the whole head (allowed: 1.0)")
    if kind == "default":
        return RopeConfig(base=float(base))
    if kind != "yarn":
        raise f.fail("rope_parameters.rope_type", f"got {kind!r}; allowed: default, yarn")
    for key in ("mscale", "mscale_all_dim"):
        if merged.get(key):
            raise f.fail(
                f"rope_parameters.{key}", f"got {merged[key]!r}; gatesweep's YaRN has the paper's temperature only (allowed: absent)"
            )
    if merged.get("truncate", True) is not True:
        raise f.fail("rope_parameters.truncate", f"got {merged['truncate']!r}; allowed: true")
    factor = merged.get("factor")
    original = merged.get("original_max_position_embeddings", c.get("original_max_position_embeddings", max_positions))
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or factor < 1:
        raise f.fail("rope_parameters.factor", f"got {factor!r}; expected a number >= 1")
    if isinstance(original, bool) or not isinstance(original, int) or original < 1:
        raise f.fail("rope_parameters.original_max_position_embeddings", f"got {original!r}; expected an integer >= 1")
    attention_factor = merged.get("attention_factor")
    expected = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0
    if attention_factor is not None and not math.isclose(float(attention_factor), expected, rel_tol=1e-9):
        raise f.fail(
            "rope_parameters.attention_factor", f"got {attention_factor!r}; gatesweep's YaRN uses 0.1 ln(factor) + 1 = {expected:.6g}"
        )
    beta_fast = merged.get("beta_fast") or 32.0
    beta_slow = merged.get("beta_slow") or 1.0
    return RopeConfig(
        base=float(base),
        scaling="yarn",
        factor=float(factor),
        original_max_len=original,
        beta_fast=float(beta_fast),
        beta_slow=float(beta_slow),
    )


HF_DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen3": {"num_key_value_heads": 32, "head_dim": 128, "intermediate_size": 22016},
    "official": {"num_key_value_heads": 32, "head_dim": 128, "intermediate_size": 22016},
    "qwen3_moe": {
        "num_key_value_heads": 4,
        "intermediate_size": 6144,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 768,
        "norm_topk_prob": False,
    },
    "qwen3_next": {
        "num_key_value_heads": 2,
        "head_dim": 256,
        "intermediate_size": 5632,
        "num_experts": 512,
        "num_experts_per_tok": 10,
        "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512,
        "norm_topk_prob": True,
    },
    "laguna": laguna.DEFAULTS,
}
"""What transformers' config classes (and the paper's) use for a field config.json leaves out;
`tests/orchestrator/test_interop_layouts.py` checks them against the installed transformers.
Qwen3-MoE has no head_dim field: its attention uses hidden_size / num_attention_heads."""


def config_from_hf(config: dict[str, Any], where: str, *, max_len: int) -> tuple[ModelConfig, str]:
    """(ModelConfig, layout) of an HF config.json dict; InteropError for what gatesweep cannot compute."""
    layout = detect_layout(config, where)
    kv_null = "num_key_value_heads" in config and config["num_key_value_heads"] is None  # transformers: as many as query heads
    config = {**HF_DEFAULTS[layout], **{k: v for k, v in config.items() if v is not None or k not in HF_DEFAULTS[layout]}}
    f = Fields(config, where)
    L = f.int("num_hidden_layers")
    H = f.int("num_attention_heads")
    K = H if kv_null else f.int("num_key_value_heads")
    D = f.int("hidden_size")
    d = f.int("head_dim", D // H if D % H == 0 else None)
    _refuse_what_gatesweep_lacks(f, L, layout)
    max_positions = f.int("max_position_embeddings", 32768)
    rope = _rope_from_hf(f, layout, max_positions)
    mapping = MAPPINGS[layout]
    read = mapping.read(f, L, H)
    moe = _moe_from_hf(f, mapping, read, L)
    try:
        cfg = ModelConfig(
            vocab_size=f.int("vocab_size"),
            d_model=D,
            n_layers=L,
            n_heads=H,
            n_kv_heads=K,
            head_dim=d,
            ffn_dim=f.int("intermediate_size"),
            max_seq_len=min(max_positions, max_len),
            rope=rope,
            qk_norm=read.qk_norm,
            tie_embeddings=f.bool("tie_word_embeddings", False),
            norm_eps=f.float("rms_norm_eps", 1e-6),
            init_std=f.float("initializer_range", 0.02),
            moe=moe,
            gate=read.gate,
        )
    except ConfigError as err:
        raise InteropError(f"{where}: {err}") from None
    return cfg, layout


def _refuse_what_gatesweep_lacks(f: Fields, L: int, layout: str) -> None:
    """Another activation, biases, sliding windows, layers that are not full attention."""
    if f.c.get("hidden_act", "silu") != "silu":
        raise f.fail("hidden_act", f"got {f.c['hidden_act']!r}; gatesweep's FFN is SwiGLU (allowed: silu)")
    f.refuse("attention_bias", lambda v: v is not False, "gatesweep's projections have no bias (allowed: false)")
    f.refuse("qkv_bias", lambda v: v is not False, "gatesweep's projections have no bias (allowed: false)")
    f.refuse("use_sliding_window", lambda v: v is not False, "gatesweep has no sliding-window attention (allowed: false)")
    types = f.c.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != L:
            raise f.fail("layer_types", f"expected a list of {L} layer types")
        other = [i for i, t in enumerate(types) if t != "full_attention"]
        if other:
            kinds = sorted({str(types[i]) for i in other})
            shown = ", ".join(map(str, other[:6])) + (", ..." if len(other) > 6 else "")
            raise f.fail(
                "layer_types",
                f"layers {shown} are {'/'.join(kinds)} ({len(other)} of {L}); gatesweep imports full-attention layers only"
                + (" (Qwen3-Next's linear attention is a Gated DeltaNet, not softmax attention)" if "linear_attention" in kinds else ""),
            )
    elif layout == "qwen3_next" and f.c.get("full_attention_interval", 4) != 1:
        raise f.fail(
            "layer_types",
            "missing: Qwen3-Next then mixes linear-attention layers in (every 4th is full); gatesweep imports full-attention layers only",
        )


def _moe_from_hf(f: Fields, mapping: LayoutMapping, read: Read, L: int) -> MoEConfig:
    """The MoE config of a layout whose layers are routed (`read.routed`), else none."""
    n_experts = f.c.get("num_local_experts", f.c.get("num_experts", 0)) if read.routed else 0
    if isinstance(n_experts, bool) or not isinstance(n_experts, int) or n_experts < 0:
        raise f.fail("num_experts", f"got {n_experts!r}; expected an integer >= 0")
    if not n_experts:
        return MoEConfig()
    f.refuse("decoder_sparse_step", lambda v: v != 1, "gatesweep's MoE models route in every layer (allowed: 1)")
    f.refuse("mlp_only_layers", lambda v: bool(v), "gatesweep's MoE models route in every layer (allowed: [])")
    mapping.check_moe(f)
    top_k = f.int("num_experts_per_tok")
    return MoEConfig(
        n_experts=n_experts,
        top_k=top_k,
        expert_dim=f.int("moe_intermediate_size"),
        norm_topk_prob=read.renormalised if read.renormalised is not None else f.bool("norm_topk_prob", False),
        aux_loss_coef=aux_coef_from_hf(f.float("router_aux_loss_coef", 0.001), L, top_k),
    )


def ignorable(name: str) -> bool:
    """Tensors of an HF folder that are not part of the language model: Qwen3-Next's
    multi-token-prediction head (transformers skips it too) and stored RoPE tables."""
    return name.startswith("mtp.") or name.endswith("rotary_emb.inv_freq")


class _Reader:
    """HF-named tensors taken one at a time, each checked for its shape; what is left over at the
    end is refused, naming it, so nothing the model computes with is dropped."""

    def __init__(self, tensors: Mapping[str, torch.Tensor], where: str, zero_centred: bool):
        self.tensors, self.where, self.zero_centred = tensors, where, zero_centred
        self.used: set[str] = set()
        self.skipped = {k for k in tensors if ignorable(k)}  # names only: `tensors` may read each one lazily

    def take(self, name: str, shape: tuple[int, ...]) -> torch.Tensor:
        if name not in self.tensors or name in self.skipped:
            raise InteropError(f"{self.where}: tensor {name} is missing (expected shape {list(shape)} for this config)")
        t = self.tensors[name]
        if tuple(t.shape) != shape:
            raise InteropError(f"{self.where}: tensor {name} has shape {list(t.shape)}; this config needs {list(shape)}")
        self.used.add(name)
        return t

    def norm(self, name: str, dim: int) -> torch.Tensor:
        t = self.take(name, (dim,))
        # 1 + w in float32, as Qwen3-Next computes it; kept in float32 (bf16 would round 1 + w)
        return t.float() + 1.0 if self.zero_centred else t

    def check_all_used(self) -> None:
        left = sorted(set(self.tensors) - self.used - self.skipped)
        if left:
            more = f" and {len(left) - 3} more" if len(left) > 3 else ""
            raise InteropError(
                f"{self.where}: tensors this config does not use: {', '.join(left[:3])}{more} (a layout gatesweep does not know?)"
            )


def state_from_hf(cfg: ModelConfig, layout: str, tensors: Mapping[str, torch.Tensor], where: str) -> dict[str, torch.Tensor]:
    """The gatesweep state dict of HF-named `tensors` (dtype kept; Qwen3-Next's zero-centred norms
    become 1 + w in float32, which is what it computes with, so they go back exactly). Every
    expected tensor must be there with its shape; a tensor left over is refused, naming it, so
    nothing the model computes with is dropped."""
    mapping = MAPPINGS[layout]
    r = _Reader(tensors, where, mapping.zero_centred)
    D = cfg.d_model
    out = {"embed.weight": r.take("model.embed_tokens.weight", (cfg.vocab_size, D)), "norm.weight": r.norm("model.norm.weight", D)}
    if cfg.tie_embeddings:
        if "lm_head.weight" in tensors:  # some writers store the tied head anyway: it must be the embedding
            head = r.take("lm_head.weight", (cfg.vocab_size, D))
            if not head.is_meta and not torch.equal(head, out["embed.weight"]):
                raise InteropError(f"{where}: tie_word_embeddings is true but lm_head.weight differs from the embedding")
    else:
        out["lm_head.weight"] = r.take("lm_head.weight", (cfg.vocab_size, D))
    for i in range(cfg.n_layers):
        src, dst = f"model.layers.{i}.", f"blocks.{i}."
        out[dst + "attn_norm.weight"] = r.norm(src + "input_layernorm.weight", D)
        out[dst + "ffn_norm.weight"] = r.norm(src + "post_attention_layernorm.weight", D)
        out.update(_attention(cfg, mapping, r, src + "self_attn.", dst + "attn."))
        if cfg.moe.n_experts:
            out.update(_experts(cfg, mapping, r, src + "mlp.", dst + "ffn."))
        else:
            F = cfg.ffn_dim
            w1, w3 = r.take(src + "mlp.gate_proj.weight", (F, D)), r.take(src + "mlp.up_proj.weight", (F, D))
            out[dst + "ffn.w13.weight"] = torch.cat([w1, w3], dim=0)
            out[dst + "ffn.w2.weight"] = r.take(src + "mlp.down_proj.weight", (D, F))
    r.check_all_used()
    return out


def _attention(cfg: ModelConfig, mapping: LayoutMapping, r: _Reader, att: str, dst: str) -> dict[str, torch.Tensor]:
    """One layer's attention: q and the gate rows as the layout holds them, k, v fused into wqkv."""
    K, d, D = cfg.n_kv_heads, cfg.head_dim, cfg.d_model
    q, g = mapping.q_from_hf(cfg, r.take, att)
    k = r.take(att + "k_proj.weight", (K * d, D))
    v = r.take(att + "v_proj.weight", (K * d, D))
    out = {dst + "wqkv.weight": torch.cat([q, k, v] + ([g] if g is not None else []), dim=0)}
    out[dst + "wo.weight"] = r.take(att + "o_proj.weight", (D, cfg.n_heads * d))
    if cfg.qk_norm:
        out[dst + "q_norm.weight"] = r.norm(att + "q_norm.weight", d)
        out[dst + "k_norm.weight"] = r.norm(att + "k_norm.weight", d)
    return out


def _experts(cfg: ModelConfig, mapping: LayoutMapping, r: _Reader, mlp: str, dst: str) -> dict[str, torch.Tensor]:
    """One MoE layer: the router and each expert's w13 / w2, from per-expert tensors or
    transformers 5's fused in-memory form; then the layout's tensors beyond gatesweep's."""
    m, D = cfg.moe, cfg.d_model
    E_dim = m.expert_dim
    out = {dst + "router.weight": r.take(mlp + "gate.weight", (m.n_experts, D))}
    fused = mlp + "experts.gate_up_proj" in r.tensors  # transformers 5's in-memory form
    if fused:
        gate_up = r.take(mlp + "experts.gate_up_proj", (m.n_experts, 2 * E_dim, D))
        down = r.take(mlp + "experts.down_proj", (m.n_experts, D, E_dim))
    for e in range(m.n_experts):
        ex = f"{mlp}experts.{e}."
        if fused:
            w13, w2 = gate_up[e], down[e]
        else:
            w13 = torch.cat([r.take(ex + "gate_proj.weight", (E_dim, D)), r.take(ex + "up_proj.weight", (E_dim, D))], dim=0)
            w2 = r.take(ex + "down_proj.weight", (D, E_dim))
        out[f"{dst}experts.{e}.w13.weight"] = w13.contiguous()
        out[f"{dst}experts.{e}.w2.weight"] = w2.contiguous()
    mapping.moe_from_hf(r.take, r.tensors, mlp, cfg, r.where)
    return out


def architecture_key(cfg: ModelConfig) -> dict[str, Any]:
    """What decides the function a model computes: the config without its training-only fields
    (preset name, initialisation, the aux-loss weight, max_seq_len, which RoPE tables ignore)."""
    data = cfg.replace(gate=cfg.gate.normalized()).to_dict()
    for key in ("size", "init_std", "max_seq_len"):
        data.pop(key, None)
    data["gate"].pop("init_std", None)
    data["moe"].pop("aux_loss_coef", None)
    if not cfg.moe.n_experts:
        data.pop("moe")
    else:
        data.pop("ffn_dim")
    return data
