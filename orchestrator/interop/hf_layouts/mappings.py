"""What each Hugging Face layout does its own way, one `LayoutMapping` per layout (`MAPPINGS`),
so that `to_hf` and `from_hf` are one mapping each, with no branch on a layout's name:

- where the query and gate rows go: gatesweep's `wqkv` holds [Wq | Wk | Wv | Wg], q and the gate
  rows head-major; Qwen3 and Qwen3-MoE have q_proj only (ungated); Qwen3-Next interleaves them
  per head in q_proj ([q_h | g_h]); the paper's layout groups them per KV head ([q of its G
  query heads | their gate rows]); Laguna has its own g_proj;
- whether its norms are stored zero-centred (Qwen3-Next: w - 1, in float32) and its rotary share;
- the MoE layer's tensors beyond gatesweep's (the width-0 shared experts of Qwen3-Next and
  Laguna, Laguna's zero score-correction bias), written, and read back checked;
- its own config.json fields, and what its config.json says of the gate, routing and QK-norm.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from gatedmodels import GateConfig, ModelConfig

from . import laguna
from .fields import Fields

Take = Callable[[str, tuple[int, ...]], torch.Tensor]
"""Reads an HF tensor by name, checking its shape (`from_hf`'s reader)."""


class Read(NamedTuple):
    """What a layout's config.json says beyond the fields every layout shares."""

    gate: GateConfig
    routed: bool
    """Whether its FFN layers are routed when it names experts."""
    qk_norm: bool = True
    renormalised: bool | None = None
    """MoE top-k weights always renormalised (True), or as `norm_topk_prob` says (None)."""


# ---- the query and gate rows --------------------------------------------------------------------
def _gate_width(cfg: ModelConfig) -> int:
    """Gate rows per query head: 1 headwise, the head width elementwise."""
    return 1 if cfg.gate.granularity == "headwise" else cfg.head_dim


def _q_only(cfg: ModelConfig, q: torch.Tensor, g: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"q_proj.weight": q}


def _read_q_only(cfg: ModelConfig, take: Take, att: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    return take(att + "q_proj.weight", (cfg.n_heads * cfg.head_dim, cfg.d_model)), None


def _per_head(cfg: ModelConfig, q: torch.Tensor, g: torch.Tensor) -> dict[str, torch.Tensor]:
    H, d, D = cfg.n_heads, cfg.head_dim, cfg.d_model
    return {"q_proj.weight": torch.cat([q.view(H, d, D), g.view(H, d, D)], dim=1).reshape(2 * H * d, D)}


def _read_per_head(cfg: ModelConfig, take: Take, att: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    H, d, D = cfg.n_heads, cfg.head_dim, cfg.d_model
    qg = take(att + "q_proj.weight", (2 * H * d, D)).view(H, 2 * d, D)
    return qg[:, :d].reshape(H * d, D), qg[:, d:].reshape(H * d, D)


def _per_kv_group(cfg: ModelConfig, q: torch.Tensor, g: torch.Tensor) -> dict[str, torch.Tensor]:
    if cfg.gate.position == "none":
        return _q_only(cfg, q, g)
    K, D = cfg.n_kv_heads, cfg.d_model
    G = cfg.n_heads // K
    q_proj = torch.cat([q.view(K, G * cfg.head_dim, D), g.view(K, G * _gate_width(cfg), D)], dim=1).reshape(-1, D)
    return {"q_proj.weight": q_proj}


def _read_per_kv_group(cfg: ModelConfig, take: Take, att: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    if cfg.gate.position == "none":
        return _read_q_only(cfg, take, att)
    H, K, d, D, w = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.d_model, _gate_width(cfg)
    G = H // K
    qg = take(att + "q_proj.weight", (H * d + H * w, D)).view(K, G * d + G * w, D)
    return qg[:, : G * d].reshape(H * d, D), qg[:, G * d :].reshape(H * w, D)


def _own_g_proj(cfg: ModelConfig, q: torch.Tensor, g: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"q_proj.weight": q, "g_proj.weight": g}


def _read_own_g_proj(cfg: ModelConfig, take: Take, att: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    H, D = cfg.n_heads, cfg.d_model
    return take(att + "q_proj.weight", (H * cfg.head_dim, D)), take(att + "g_proj.weight", (H * _gate_width(cfg), D))


# ---- an MoE layer's tensors beyond gatesweep's ------------------------------------------------------
def _no_tensors(cfg: ModelConfig, mlp: str, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    return {}


def _take_nothing(take: Take, tensors: Mapping[str, torch.Tensor], mlp: str, cfg: ModelConfig, where: str) -> None:
    pass


def _width0_expert(D: int) -> dict[str, tuple[int, int]]:
    """The shapes of a width-0 shared expert's projections."""
    return {"gate_proj": (0, D), "up_proj": (0, D), "down_proj": (D, 0)}


def _next_shared_expert(cfg: ModelConfig, mlp: str, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Qwen3-Next's shared expert, given width 0: it adds nothing."""
    D = cfg.d_model
    out = {f"{mlp}shared_expert.{name}.weight": torch.zeros(shape, dtype=dtype) for name, shape in _width0_expert(D).items()}
    out[mlp + "shared_expert_gate.weight"] = torch.zeros(1, D, dtype=dtype)
    return out


def _take_next_shared_expert(take: Take, tensors: Mapping[str, torch.Tensor], mlp: str, cfg: ModelConfig, where: str) -> None:
    D = cfg.d_model
    for name, shape in _width0_expert(D).items():
        if f"{mlp}shared_expert.{name}.weight" in tensors:
            take(f"{mlp}shared_expert.{name}.weight", shape)
    if mlp + "shared_expert_gate.weight" in tensors:
        take(mlp + "shared_expert_gate.weight", (1, D))  # gates a width-0 expert: no effect


# ---- config.json: the layout's own fields, and what they say -----------------------------------------
def _as_is(cfg: ModelConfig, config: dict[str, Any]) -> dict[str, Any]:
    return config


def _full_attention(cfg: ModelConfig, config: dict[str, Any]) -> dict[str, Any]:
    config.update(max_window_layers=cfg.n_layers, layer_types=["full_attention"] * cfg.n_layers)
    return config


def _official_fields(cfg: ModelConfig, config: dict[str, Any]) -> dict[str, Any]:
    gated = cfg.gate.position != "none"
    headwise = gated and cfg.gate.granularity == "headwise"
    config = _full_attention(cfg, config)
    config.update(
        use_qk_norm=cfg.qk_norm, qkv_bias=False, headwise_attn_output_gate=headwise, elementwise_attn_output_gate=gated and not headwise
    )
    return config


def _next_fields(cfg: ModelConfig, config: dict[str, Any]) -> dict[str, Any]:
    config.update(
        partial_rotary_factor=1.0,
        layer_types=["full_attention"] * cfg.n_layers,
        shared_expert_intermediate_size=0,
        num_experts=cfg.moe.n_experts,
    )
    return config


def _ungated(routed: bool) -> Callable[[Fields, int, int], Read]:
    return lambda f, L, H: Read(GateConfig(), routed)


def _read_next(f: Fields, L: int, H: int) -> Read:
    return Read(GateConfig(position="G1", granularity="elementwise"), routed=True)


def _read_official(f: Fields, L: int, H: int) -> Read:
    if f.bool("headwise_attn_output_gate", False):
        gate = GateConfig(position="G1", granularity="headwise")
    elif f.bool("elementwise_attn_output_gate", False):
        gate = GateConfig(position="G1", granularity="elementwise")
    else:
        gate = GateConfig()
    return Read(gate, routed=False, qk_norm=f.bool("use_qk_norm", True))


def _read_laguna(f: Fields, L: int, H: int) -> Read:
    gate, sparse = laguna.read_config(f, L, H)
    return Read(gate, routed=sparse, renormalised=True)


def _no_check(f: Fields) -> None:
    pass


def _next_has_no_shared_expert(f: Fields) -> None:
    f.refuse("shared_expert_intermediate_size", lambda v: v != 0, "gatesweep's MoE has no shared expert (allowed: 0)")
    if "shared_expert_intermediate_size" not in f.c:
        raise f.fail("shared_expert_intermediate_size", "missing (Qwen3-Next's default is 512); gatesweep's MoE has no shared expert")


# ---- the registry -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LayoutMapping:
    """One layout's own part of the mapping (the module's docstring); the rest is shared."""

    q_to_hf: Callable[[ModelConfig, torch.Tensor, torch.Tensor], dict[str, torch.Tensor]]
    """(q rows, gate rows) -> the self_attn tensors holding them, named under `self_attn.`."""
    q_from_hf: Callable[[ModelConfig, Take, str], tuple[torch.Tensor, torch.Tensor | None]]
    """The inverse: (q rows, gate rows or None) read under the `self_attn.` prefix given."""
    read: Callable[[Fields, int, int], Read]
    """What config.json says of the gate, routing and QK-norm (fields, n_layers, n_heads)."""
    config_fields: Callable[[ModelConfig, dict[str, Any]], dict[str, Any]] = _as_is
    """The shared config.json dict made this layout's."""
    zero_centred: bool = False
    """Norm weights stored as w - 1 in float32 (the layout computes with 1 + w)."""
    partial_rotary: float | None = None
    """`partial_rotary_factor` written into rope_parameters (None: not written)."""
    moe_to_hf: Callable[[ModelConfig, str, torch.dtype], dict[str, torch.Tensor]] = _no_tensors
    """An MoE layer's tensors beyond gatesweep's, under the `mlp.` prefix given."""
    moe_from_hf: Callable[[Take, Mapping[str, torch.Tensor], str, ModelConfig, str], None] = _take_nothing
    """Reads (and checks) them on import, so none is left over."""
    check_moe: Callable[[Fields], None] = _no_check
    """Refuses an MoE config.json this layout holds and gatesweep cannot compute."""


MAPPINGS: dict[str, LayoutMapping] = {
    "qwen3": LayoutMapping(_q_only, _read_q_only, _ungated(False), _full_attention),
    "qwen3_moe": LayoutMapping(_q_only, _read_q_only, _ungated(True)),
    "qwen3_next": LayoutMapping(
        _per_head,
        _read_per_head,
        _read_next,
        _next_fields,
        zero_centred=True,
        partial_rotary=1.0,
        moe_to_hf=_next_shared_expert,
        moe_from_hf=_take_next_shared_expert,
        check_moe=_next_has_no_shared_expert,
    ),
    "official": LayoutMapping(_per_kv_group, _read_per_kv_group, _read_official, _official_fields),
    "laguna": LayoutMapping(
        _own_g_proj, _read_own_g_proj, _read_laguna, laguna.config_fields, moe_to_hf=laguna.moe_tensors, moe_from_hf=laguna.take_moe_extras
    ),
}
