"""gatedmodels: a Qwen3-style decoder with every gated-attention variant of Qiu et al. 2025.

    from gatedmodels import ModelConfig, GateConfig, GatedTransformer
    cfg = ModelConfig.preset("tiny", gate=GateConfig(position="G1"))
    logits = GatedTransformer(cfg)(input_ids)

Torch only: no Ray, MLflow or DeepSpeed imports. The configs import without torch (the CLI
validates sweep files without paying for it); the model and probes load torch on first use.
"""

from importlib import import_module
from typing import Any

from . import presets  # noqa: F401  (registers the size presets)
from .config import ATTENTION_KINDS, KV_CACHE_KINDS, POSITIONS, PRESETS, AttentionConfig, GateConfig, ModelConfig, MoEConfig, RopeConfig
from .typedconfig import Config, ConfigError, Issue

_LAZY = {
    "GatedTransformer": "model",
    "generate_greedy": "generation",
    "build_meta": "model",
    "rope_override": "model",
    "ProbeResult": "probes",
    "first_token_attention": "probes",
    "first_token_share": "probes",
    "gate_histogram": "probes",
    "gate_range": "probes",
    "gate_statistics": "probes",
    "massive_activations": "probes",
    "sink_ratio": "probes",
    "sink_slot_mass": "probes",
    "uniform_first_token_attention": "probes",
    "value_norm_ratio_at_bos": "probes",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'gatedmodels' has no attribute {name!r}")


__all__ = [
    "ATTENTION_KINDS",
    "KV_CACHE_KINDS",
    "POSITIONS",
    "PRESETS",
    "AttentionConfig",
    "Config",
    "ConfigError",
    "GateConfig",
    "Issue",
    "ModelConfig",
    "MoEConfig",
    "RopeConfig",
    *_LAZY,
]
