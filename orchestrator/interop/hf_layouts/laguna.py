"""Poolside's Laguna (transformers `LagunaForCausalLM`, 5.23) as a gatesweep layout.

Laguna's attention is gatesweep's with a G1 gate of activation `softplus`: q_proj, k_proj,
v_proj, per-head QK-norm, RoPE, softmax, then `attn * softplus(g_proj(x))` before o_proj, with
`g_proj` = gatesweep's gate rows (H rows for `gating: per-head` or true, H·d rows head-major for
`per-element`; transformers builds per-element for `gating: false` too, and so does this
import). RMSNorm weights are stored as is (w, not zero-centred).

What a gatesweep model must be to be written as Laguna, and what an import refuses:
- every layer full attention with the whole head rotated (Laguna's defaults are sliding-window
  layers and partial rotary 0.5 on the full ones: refused), one head count for every layer;
- the gate G1 softplus, head-specific, multiplicative, of X (a G2-G5 gate, a sigmoid or a shared
  or constant one has no Laguna form), QK-norm on;
- FFN: every layer dense (`mlp_layer_types` all `dense`) or every layer routed (all `sparse`;
  Laguna's default has a dense first layer). Laguna's router is a sigmoid with renormalised
  top-k weights, gatesweep's a softmax: the two choose the same expert and give it weight 1 when
  top_k is 1, and differ otherwise, so MoE goes across with `top_k: 1` (and `norm_topk_prob`),
  a zero `e_score_correction_bias`, a shared expert of width 0, routed scaling 1 and no
  router softcapping.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from gatedmodels import GateConfig, ModelConfig

from ..errors import InteropError
from .fields import Fields

GATING = {"headwise": "per-head", "elementwise": "per-element"}
DEFAULTS: dict[str, Any] = {
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 8192,
    "num_experts": 256,
    "num_experts_per_tok": 8,
    "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512,
    "rope_parameters": {
        "full_attention": {"rope_type": "default", "rope_theta": 500000.0, "partial_rotary_factor": 0.5},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0},
    },
}
"""LagunaConfig's defaults for the fields a config.json may leave out (checked against the
installed transformers in tests/orchestrator/test_interop_laguna.py)."""


def gate_problem(gate: GateConfig) -> str | None:
    """Why Laguna's g_proj cannot hold `gate`, or None."""
    if not (gate.position == "G1" and gate.kind == "gate" and gate.activation == "softplus"):
        return "Laguna's gate is G1 softplus (headwise or elementwise); a gate at G2-G5, another activation or no gate has no Laguna form"
    if gate.sharing != "head_specific" or gate.mode != "multiplicative" or not gate.input_dependent:
        return "Laguna's gate is head-specific, multiplicative and a function of X"
    return None


def layout_problem(cfg: ModelConfig) -> str | None:
    problem = gate_problem(cfg.gate)
    if problem:
        return problem
    if not cfg.qk_norm:
        return "model.qk_norm false: Laguna always applies QK-norm"
    if cfg.attention.kind != "softmax":
        return f"model.attention.kind {cfg.attention.kind!r}: Laguna's attention is softmax"
    m = cfg.moe
    if m.n_experts and (m.top_k != 1 or not m.norm_topk_prob):
        return (
            f"model.moe.top_k {m.top_k}: Laguna routes by sigmoid with renormalised weights, gatesweep by softmax; "
            "they agree only with top_k 1 and norm_topk_prob true"
        )
    return None


def config_fields(cfg: ModelConfig, config: dict[str, Any]) -> dict[str, Any]:
    """The generic config.json dict of `to_hf` made a LagunaConfig one (strict field types)."""
    for key in ("rope_scaling", "rope_theta", "use_sliding_window", "sliding_window", "max_window_layers", "torch_dtype"):
        config.pop(key, None)  # Laguna's strict config types sliding_window as int; rope_scaling would override rope_parameters
    rope = {**config.pop("rope_parameters"), "partial_rotary_factor": 1.0}
    L, sparse = cfg.n_layers, cfg.moe.n_experts > 0
    config.update(
        rope_parameters={"full_attention": rope},
        layer_types=["full_attention"] * L,
        num_attention_heads_per_layer=[cfg.n_heads] * L,
        gating=GATING[cfg.gate.granularity],
        mlp_layer_types=["sparse" if sparse else "dense"] * L,
        shared_expert_intermediate_size=0,
        moe_routed_scaling_factor=1.0,
        moe_router_logit_softcapping=0.0,
        moe_apply_router_weight_on_input=False,
    )
    if sparse:
        config.pop("norm_topk_prob", None)  # Laguna always renormalises
        for key in ("decoder_sparse_step", "mlp_only_layers"):
            config.pop(key, None)
    return config


def moe_tensors(cfg: ModelConfig, mlp: str, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """An MoE layer's Laguna-only tensors under `mlp`: the zero score-correction bias and the
    width-0 shared expert (under the names Poolside's checkpoints use; transformers renames them)."""
    D = cfg.d_model
    return {
        mlp + "experts.e_score_correction_bias": torch.zeros(cfg.moe.n_experts, dtype=dtype),
        mlp + "shared_expert.gate_proj.weight": torch.zeros(0, D, dtype=dtype),
        mlp + "shared_expert.up_proj.weight": torch.zeros(0, D, dtype=dtype),
        mlp + "shared_expert.down_proj.weight": torch.zeros(D, 0, dtype=dtype),
    }


def read_config(f: Fields, L: int, H: int) -> tuple[GateConfig, bool]:
    """(the gate, whether every layer is routed) of a Laguna config.json; InteropError naming
    the field for what gatesweep cannot compute."""
    gating = f.c.get("gating", True)
    if gating is True or gating == "per-head":
        granularity = "headwise"
    elif gating is False or gating == "per-element":
        granularity = "elementwise"
    else:
        raise f.fail("gating", f"got {gating!r}; allowed: true, false, per-head, per-element")
    heads = f.c.get("num_attention_heads_per_layer")
    if heads is not None and heads != [H] * L:
        raise f.fail(
            "num_attention_heads_per_layer", f"got {heads!r}; gatesweep's layers share one head count (allowed: {H} in every layer)"
        )
    kinds = f.c.get("mlp_layer_types") or ["dense"] + ["sparse"] * (L - 1)
    if not isinstance(kinds, list) or len(kinds) != L or set(kinds) - {"dense", "sparse"}:
        raise f.fail("mlp_layer_types", f"expected a list of {L} of dense, sparse")
    if len(set(kinds)) > 1:
        raise f.fail(
            "mlp_layer_types",
            f"got {kinds.count('dense')} dense and {kinds.count('sparse')} sparse layers (Laguna's default: the first dense); "
            "gatesweep's layers are all dense or all routed",
        )
    sparse = kinds[0] == "sparse"
    if sparse:
        for key, allowed in (("moe_routed_scaling_factor", 1.0), ("moe_router_logit_softcapping", 0.0)):
            if f.c.get(key, allowed) != allowed:
                raise f.fail(key, f"got {f.c[key]!r}; gatesweep's router has none (allowed: {allowed})")
        if f.c.get("moe_apply_router_weight_on_input", False) is not False:
            raise f.fail("moe_apply_router_weight_on_input", "got true; allowed: false")
        if f.c.get("shared_expert_intermediate_size") != 0:
            raise f.fail(
                "shared_expert_intermediate_size",
                f"got {f.c.get('shared_expert_intermediate_size')!r}; gatesweep's MoE has no shared expert (allowed: 0)",
            )
        top_k = f.c.get("num_experts_per_tok")
        if top_k != 1:
            raise f.fail(
                "num_experts_per_tok",
                f"got {top_k!r}; Laguna's sigmoid router and gatesweep's softmax router weigh experts alike only with one expert per token (allowed: 1)",
            )
    return GateConfig(position="G1", granularity=granularity, activation="softplus"), sparse


def take_moe_extras(
    take: Callable[[str, tuple[int, ...]], torch.Tensor], tensors: Mapping[str, torch.Tensor], mlp: str, cfg: ModelConfig, where: str
) -> None:
    """Read (and check) layer tensors Laguna's MoE has beyond gatesweep's: the score-correction
    bias (must be zero: with one expert per token it would change which expert is chosen) and
    the width-0 shared expert, under the checkpoint's or transformers' names."""
    E, D = cfg.moe.n_experts, cfg.d_model
    for name in (mlp + "experts.e_score_correction_bias", mlp + "gate.e_score_correction_bias"):
        if name in tensors:
            bias = take(name, (E,))
            if not bias.is_meta and bool(bias.float().abs().max() > 0):
                raise InteropError(f"{where}: tensor {name} is not zero; gatesweep's router has no score-correction bias")
    for prefix in ("shared_expert.", "shared_experts."):
        for name, shape in (("gate_proj", (0, D)), ("up_proj", (0, D)), ("down_proj", (D, 0))):
            if f"{mlp}{prefix}{name}.weight" in tensors:
                take(f"{mlp}{prefix}{name}.weight", shape)
