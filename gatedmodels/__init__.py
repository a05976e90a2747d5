"""gatedmodels: a Qwen3-style decoder with every gated-attention variant of Qiu et al. 2025.

    from gatedmodels import ModelConfig, GateConfig, GatedTransformer
    cfg = ModelConfig.preset("tiny", gate=GateConfig(position="G1"))
    logits = GatedTransformer(cfg)(input_ids)

Torch only: no Ray, MLflow or DeepSpeed imports.
"""

from .config import POSITIONS, GateConfig, ModelConfig, MoEConfig, RopeConfig
from .configbase import Config, ConfigError, Issue
from .model import GatedTransformer, build_meta, rope_override
from .presets import PRESETS
from .probes import (
    ProbeResult,
    first_token_attention,
    gate_histogram,
    gate_statistics,
    massive_activations,
    sink_ratio,
    uniform_first_token_attention,
    value_norm_ratio_at_bos,
)

__all__ = [
    "POSITIONS", "PRESETS", "Config", "ConfigError", "GateConfig", "GatedTransformer", "Issue", "ModelConfig",
    "MoEConfig", "ProbeResult", "RopeConfig", "build_meta", "rope_override", "first_token_attention", "gate_histogram",
    "gate_statistics", "massive_activations", "sink_ratio", "uniform_first_token_attention", "value_norm_ratio_at_bos",
]
