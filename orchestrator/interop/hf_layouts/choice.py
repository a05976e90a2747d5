"""Which Hugging Face layout a gatesweep model takes (see the package docstring)."""

from __future__ import annotations

from dataclasses import dataclass

from gatedmodels import GateConfig, ModelConfig

from ..errors import InteropError
from . import laguna

FORMATS = ("hf", "official", "gatesweep")


@dataclass(frozen=True)
class Layout:
    name: str
    architecture: str
    model_type: str
    needs_code: bool
    """True when transformers cannot load it without the paper's modeling file."""
    title: str


LAYOUTS = {
    "qwen3": Layout("qwen3", "Qwen3ForCausalLM", "qwen3", False, "Qwen3ForCausalLM"),
    "qwen3_moe": Layout("qwen3_moe", "Qwen3MoeForCausalLM", "qwen3_moe", False, "Qwen3MoeForCausalLM"),
    "qwen3_next": Layout(
        "qwen3_next", "Qwen3NextForCausalLM", "qwen3_next", False, "Qwen3NextForCausalLM (full attention, partial rotary 1.0)"
    ),
    "official": Layout(
        "official", "Qwen3ForCausalLM", "qwen3", True, "the paper's gated Qwen3 (qiuzh20/gated_attention modeling_qwen3.py)"
    ),
    "laguna": Layout(
        "laguna", "LagunaForCausalLM", "laguna", False, "LagunaForCausalLM (softplus output gate, full attention, rotary 1.0)"
    ),
}
OFFICIAL_NOTE = (
    "transformers loads this layout only with the paper's modeling_qwen3.py and configuration_qwen3.py "
    "(github.com/qiuzh20/gated_attention) beside config.json, via trust_remote_code; gatesweep import reads it as is"
)


# ---- which layout a model takes --------------------------------------------------------------
def _g1(gate: GateConfig, granularity: str) -> bool:
    """The paper's G1 gate as the HF layouts hold it: head-specific, multiplicative, sigmoid, of X."""
    return (
        gate.position == "G1"
        and gate.kind == "gate"
        and gate.granularity == granularity
        and gate.sharing == "head_specific"
        and gate.mode == "multiplicative"
        and gate.activation == "sigmoid"
        and gate.input_dependent
    )


def _common_problem(cfg: ModelConfig) -> str | None:
    if cfg.position_encoding != "rope":
        return f"model.position_encoding {cfg.position_encoding!r}: the HF layouts use RoPE"
    if cfg.attention.kind != "softmax":
        return f"model.attention.kind {cfg.attention.kind!r}: the HF layouts' attention is softmax"
    return None


def layout_problem(cfg: ModelConfig, layout: str) -> str | None:
    """Why `cfg` cannot be written in `layout`, or None."""
    common = _common_problem(cfg)
    if common:
        return common
    gate, moe = cfg.gate, cfg.moe.n_experts > 0
    none = gate.position == "none"
    if layout in ("qwen3", "qwen3_moe"):
        if not none:
            return f"{LAYOUTS[layout].architecture} has no attention gate"
        if moe != (layout == "qwen3_moe"):
            return "a dense model is Qwen3ForCausalLM" if not moe else "an MoE model is Qwen3MoeForCausalLM"
        if not cfg.qk_norm:
            return "model.qk_norm false: Qwen3 always applies QK-norm"
        return None
    if layout == "qwen3_next":
        if not _g1(gate, "elementwise"):
            return "Qwen3-Next's gate is G1 elementwise (sigmoid, head-specific, multiplicative)"
        if not cfg.qk_norm:
            return "model.qk_norm false: Qwen3-Next always applies QK-norm"
        return None
    if layout == "laguna":
        return laguna.layout_problem(cfg)
    if layout == "official":
        if not (none or _g1(gate, "elementwise") or _g1(gate, "headwise")):
            return "the paper's layout holds G1 headwise or elementwise (sigmoid, head-specific, multiplicative) or no gate"
        if moe:
            return f"model.moe.n_experts {cfg.moe.n_experts}: the paper's modeling_qwen3.py is dense"
        return None
    raise AssertionError(layout)


def _candidates(cfg: ModelConfig, fmt: str) -> list[str]:
    """The layouts `fmt` would write `cfg` in: for `hf` the one transformers loads without custom
    code when there is one, else (G1 headwise) the paper's layout."""
    if fmt == "official":
        return ["official"]
    gate = cfg.gate
    if gate.position == "none":
        return ["qwen3_moe" if cfg.moe.n_experts else "qwen3"]
    if _g1(gate, "elementwise"):
        return ["qwen3_next"]
    if laguna.gate_problem(gate) is None:
        return ["laguna"]
    return ["official"]


def hf_layout_for(cfg: ModelConfig) -> str:
    """The layout `--format hf` writes; InteropError naming the variant when there is none."""
    return _pick(cfg, "hf")


def layout_for_format(cfg: ModelConfig, fmt: str, layout: str | None = None) -> str | None:
    """The layout of `fmt` for `cfg` (None for gatesweep's own format), or `layout` when one is
    asked for (`--layout`, with `--format hf` only); InteropError when it cannot hold the model,
    naming the variant and the formats and layouts it can take."""
    if fmt not in FORMATS:
        raise InteropError(f"--format: got {fmt!r}; allowed: {', '.join(FORMATS)}")
    if layout is not None:
        if layout not in LAYOUTS:
            raise InteropError(f"--layout: got {layout!r}; allowed: {', '.join(LAYOUTS)}")
        if fmt != "hf":
            raise InteropError(f"--layout {layout}: only with --format hf (got --format {fmt})")
        problem = layout_problem(cfg, layout)
        if problem:
            can = [name for name in LAYOUTS if layout_problem(cfg, name) is None]
            raise InteropError(
                f"{variant(cfg)}: --layout {layout} cannot hold this model ({problem}); "
                f"layouts it can take: {', '.join(can) or 'none'} (and --format gatesweep)"
            )
        return layout
    if fmt == "gatesweep":
        return None
    return _pick(cfg, fmt)


def formats_for(cfg: ModelConfig) -> list[str]:
    """The formats that can hold `cfg` (gatesweep's own always can)."""
    return [f for f in FORMATS if f == "gatesweep" or any(layout_problem(cfg, c) is None for c in _candidates(cfg, f))]


def _pick(cfg: ModelConfig, fmt: str) -> str:
    candidates = _candidates(cfg, fmt)
    for c in candidates:
        if layout_problem(cfg, c) is None:
            return c
    problem = layout_problem(cfg, candidates[0])
    can = [f for f in formats_for(cfg) if f != fmt]
    raise InteropError(f"{variant(cfg)}: --format {fmt} cannot hold this model ({problem}); formats it can take: {', '.join(can)}")


def variant(cfg: ModelConfig) -> str:
    """The gate variant's label, `ungated` for none."""
    return cfg.gate.label if cfg.gate.position != "none" else "ungated"
