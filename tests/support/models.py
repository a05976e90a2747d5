"""The one tiny `ModelConfig` builder of the tests that need a model of given dimensions (not a
preset): `tiny_config(**fields)` is TINY with `fields` over it. TINY is Qwen-like in miniature: a
padded vocabulary, GQA (4 query heads over 2 KV heads), head width 8."""

from __future__ import annotations

from typing import Any

from gatedmodels import ModelConfig

V = 320
"""TINY's vocabulary: padded, as Qwen's is."""
TINY: dict[str, Any] = dict(
    vocab_size=V, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, ffn_dim=48, max_seq_len=64, init_std=0.2
)
YARN = {"scaling": "yarn", "factor": 4.0, "original_max_len": 16, "base": 500.0}
"""A YaRN RoPE that stretches TINY's 16 original positions 4 times."""


def tiny_config(*, yarn: bool = False, **fields: Any) -> ModelConfig:
    """TINY with `fields` (any ModelConfig field, nested ones as dicts) over it; `yarn`: RoPE YARN."""
    data = {**TINY, **fields}
    if yarn:
        data["rope"] = YARN
    return ModelConfig.from_dict(data)
