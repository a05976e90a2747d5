"""gatesweep -> Hugging Face: a `ModelConfig` and its state dict as a config.json dict and HF-named tensors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from gatedmodels import ModelConfig

from ..errors import InteropError
from .choice import LAYOUTS, layout_problem, variant
from .mappings import MAPPINGS, LayoutMapping

Cast = Callable[[torch.Tensor], torch.Tensor]


def aux_coef_to_hf(coef: float, cfg: ModelConfig) -> float:
    """gatesweep sums a Switch loss E·Σ f_i P_i per layer (f_i: the share of the N·k routing slots
    that chose expert i); transformers' `load_balancing_loss_func` pools router statistics over all
    layers and counts each of the k choices separately, which is top_k times one layer's value. So
    c_gs · Σ_layers L_gs equals c_hf · L_hf for c_hf = c_gs · n_layers / top_k when the routing
    statistics are alike in every layer (exactly so with one layer)."""
    return coef * cfg.n_layers / cfg.moe.top_k


def aux_coef_from_hf(coef: float, n_layers: int, top_k: int) -> float:
    return coef * top_k / n_layers


def _rope_fields(cfg: ModelConfig, max_positions: int, partial: float | None) -> dict[str, Any]:
    r = cfg.rope
    params: dict[str, Any] = {"rope_type": "default", "rope_theta": r.base}
    legacy: dict[str, Any] | None = None
    if r.scaling == "yarn":
        yarn = {
            "factor": r.factor,
            "original_max_position_embeddings": r.original_max_len,
            "beta_fast": r.beta_fast,
            "beta_slow": r.beta_slow,
        }
        params = {"rope_type": "yarn", "rope_theta": r.base, **yarn}
        legacy = {"rope_type": "yarn", "type": "yarn", **yarn}  # transformers 4.x and vLLM read rope_scaling
        max_positions = max(max_positions, int(r.original_max_len * r.factor))
    if partial is not None:
        params["partial_rotary_factor"] = partial
    # transformers 5 reads rope_parameters; rope_theta + rope_scaling are the 4.x form (the same values)
    return {"rope_parameters": params, "rope_theta": r.base, "rope_scaling": legacy, "max_position_embeddings": max_positions}


def to_hf(
    cfg: ModelConfig,
    state: dict[str, torch.Tensor],
    layout: str,
    *,
    dtype: torch.dtype,
    max_positions: int | None = None,
    token_ids: dict[str, int | None] | None = None,
    extra: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(config.json dict, HF-named tensors in `dtype`) of a gatesweep model in `layout`; `extra`
    goes into config.json as is."""
    problem = layout_problem(cfg, layout)
    if problem:
        raise InteropError(f"{variant(cfg)}: layout {layout} cannot hold this model ({problem})")
    config = hf_config(cfg, layout, dtype=dtype, max_positions=max_positions, token_ids=token_ids)
    if extra:
        config.update(extra)
    return config, hf_tensors(cfg, state, layout, dtype)


# ---- config.json --------------------------------------------------------------------------------------
def hf_config(
    cfg: ModelConfig, layout: str, *, dtype: torch.dtype, max_positions: int | None = None, token_ids: dict[str, int | None] | None = None
) -> dict[str, Any]:
    """The config.json dict of `cfg` in `layout`: the fields every layout shares, the MoE ones,
    then the layout's own (`mappings`)."""
    mapping, ids = MAPPINGS[layout], token_ids or {}
    lay = LAYOUTS[layout]
    config: dict[str, Any] = {
        "architectures": [lay.architecture],
        "model_type": lay.model_type,
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "intermediate_size": cfg.ffn_dim,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": cfg.norm_eps,
        "initializer_range": cfg.init_std,
        "tie_word_embeddings": cfg.tie_embeddings,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "use_cache": True,
        "use_sliding_window": False,
        "sliding_window": None,
        "bos_token_id": ids.get("bos"),
        "eos_token_id": ids.get("eos"),
        "pad_token_id": ids.get("pad"),
        "dtype": str(dtype).removeprefix("torch."),
        "torch_dtype": str(dtype).removeprefix("torch."),  # transformers 4.x's name (5.x reads dtype)
        **_rope_fields(cfg, max(cfg.max_seq_len, max_positions or 0), mapping.partial_rotary),
    }
    if cfg.moe.n_experts:
        config.update(
            num_experts=cfg.moe.n_experts,
            num_experts_per_tok=cfg.moe.top_k,
            moe_intermediate_size=cfg.moe.expert_dim,
            norm_topk_prob=cfg.moe.norm_topk_prob,
            router_aux_loss_coef=aux_coef_to_hf(cfg.moe.aux_loss_coef, cfg),
            decoder_sparse_step=1,
            mlp_only_layers=[],
            output_router_logits=False,
        )
    return mapping.config_fields(cfg, config)


# ---- the tensors --------------------------------------------------------------------------------------
def hf_tensors(cfg: ModelConfig, state: dict[str, torch.Tensor], layout: str, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """gatesweep's state dict renamed (and its fused tensors split) into `layout`'s tensors, in `dtype`."""
    mapping = MAPPINGS[layout]

    def cast(t: torch.Tensor) -> torch.Tensor:
        return t.detach().to(dtype).contiguous()

    def norm(t: torch.Tensor) -> torch.Tensor:
        # Qwen3-Next's norms are stored zero-centred in float32 whatever `dtype`: w - 1 of a bf16
        # weight below 0.5 has no bf16 value, so a bf16 file could not bring it back (transformers
        # casts it to the model's dtype on load, exactly so for w >= 0.5; it computes 1 + w in fp32)
        return (t.float() - 1.0).contiguous() if mapping.zero_centred else cast(t)

    out = {"model.embed_tokens.weight": cast(state["embed.weight"]), "model.norm.weight": norm(state["norm.weight"])}
    if not cfg.tie_embeddings:
        out["lm_head.weight"] = cast(state["lm_head.weight"])
    for i in range(cfg.n_layers):
        src, dst = f"blocks.{i}.", f"model.layers.{i}."
        out[dst + "input_layernorm.weight"] = norm(state[src + "attn_norm.weight"])
        out[dst + "post_attention_layernorm.weight"] = norm(state[src + "ffn_norm.weight"])
        out.update(_attention(cfg, state, mapping, src + "attn.", dst + "self_attn.", cast, norm))
        out.update(_ffn(cfg, state, mapping, src + "ffn.", dst + "mlp.", cast, dtype))
    return out


def _attention(
    cfg: ModelConfig, state: dict[str, torch.Tensor], mapping: LayoutMapping, src: str, att: str, cast: Cast, norm: Cast
) -> dict[str, torch.Tensor]:
    """One layer's attention: wqkv split into q, k, v and the gate rows, q and the gate rows
    placed as the layout holds them."""
    H, K, d = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    wqkv = state[src + "wqkv.weight"]
    q, k, v, g = wqkv.split([H * d, K * d, K * d, wqkv.shape[0] - H * d - 2 * K * d])
    out = {att + name: cast(t) for name, t in mapping.q_to_hf(cfg, q, g).items()}
    out[att + "k_proj.weight"] = cast(k)
    out[att + "v_proj.weight"] = cast(v)
    out[att + "o_proj.weight"] = cast(state[src + "wo.weight"])
    if cfg.qk_norm:
        out[att + "q_norm.weight"] = norm(state[src + "q_norm.weight"])
        out[att + "k_norm.weight"] = norm(state[src + "k_norm.weight"])
    return out


def _ffn(
    cfg: ModelConfig, state: dict[str, torch.Tensor], mapping: LayoutMapping, src: str, mlp: str, cast: Cast, dtype: torch.dtype
) -> dict[str, torch.Tensor]:
    """One layer's FFN: w13 split into gate_proj and up_proj, per expert in an MoE layer (with
    the router and the layout's tensors beyond gatesweep's)."""
    if not cfg.moe.n_experts:
        w1, w3 = state[src + "w13.weight"].chunk(2, dim=0)
        return {
            mlp + "gate_proj.weight": cast(w1),
            mlp + "up_proj.weight": cast(w3),
            mlp + "down_proj.weight": cast(state[src + "w2.weight"]),
        }
    out = {mlp + "gate.weight": cast(state[src + "router.weight"])}
    for e in range(cfg.moe.n_experts):
        w1, w3 = state[f"{src}experts.{e}.w13.weight"].chunk(2, dim=0)
        out[f"{mlp}experts.{e}.gate_proj.weight"] = cast(w1)
        out[f"{mlp}experts.{e}.up_proj.weight"] = cast(w3)
        out[f"{mlp}experts.{e}.down_proj.weight"] = cast(state[f"{src}experts.{e}.w2.weight"])
    out.update(mapping.moe_to_hf(cfg, mlp, dtype))
    return out
