"""Parameter counts and FLOPs from the config (`gatedmodels.costs`) against the built model:
counted parameters, and FLOPs measured by torch's own FlopCounterMode on a real forward and
backward pass."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from gatedmodels import GateConfig, ModelConfig, build_meta
from gatedmodels.costs import model_costs
from gatedmodels.model import GatedTransformer

GATES = [
    {},
    {"position": "G1"},
    {"position": "G1", "granularity": "headwise"},
    {"position": "G1", "sharing": "head_shared"},
    {"position": "G2"},
    {"position": "G3", "granularity": "headwise"},
    {"position": "G4"},
    {"position": "G5"},
    {"position": "G1", "input_dependent": False},
    {"position": "G1", "kind": "rmsnorm"},
    {"position": "G1", "kind": "silu"},
    {"position": "G1", "mode": "additive", "activation": "silu"},
    {"position": "G1", "activation": "softplus"},
    {"position": "G1", "granularity": "headwise", "activation": "softplus"},
    {"position": "G1", "granularity": "headwise", "activation": "2sigmoid"},
]
KINDS = ["softmax", "softmax1", "learned_sink", "key_bias", "softpick", "sigmoid"]
PRESETS = ["tiny", "bigram-1l", "small", "125m", "dense-1.7b", "moe-15a2b"]


def _cfg(preset: str, gate: dict, kind: str = "softmax", **over) -> ModelConfig:
    return ModelConfig.preset(preset, gate=GateConfig(**gate), attention={"kind": kind}, **over)


def _linear_params(model: GatedTransformer) -> int:
    """Weights a token goes through: every Linear (MoE: top_k of n_experts) and the tied head."""
    n = 0
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and ".experts." not in name:
            n += mod.weight.numel()
    m = model.cfg.moe
    if m.n_experts:
        n += model.cfg.n_layers * m.top_k * 3 * model.cfg.d_model * m.expert_dim
    if model.lm_head is None:
        n += model.embed.weight.numel()
    return n


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("gate", GATES, ids=lambda g: "-".join(f"{v}" for v in g.values()) or "none")
def test_parameter_counts_equal_the_built_model(preset, gate):
    cfg = _cfg(preset, gate)
    costs, model = model_costs(cfg), build_meta(cfg)
    assert costs.params == model.num_params()
    assert costs.params_non_embedding == model.num_params(exclude_embeddings=True)
    assert costs.params_gate == model.gate_params()
    assert costs.matmul_params == _linear_params(model)


@pytest.mark.parametrize("kind", KINDS)
def test_attention_kinds_and_learned_positions_are_counted(kind):
    for over in ({}, {"position_encoding": "learned"}, {"tie_embeddings": False}, {"qk_norm": False}):
        cfg = _cfg("tiny", {"position": "G1"}, kind, **over)
        model = build_meta(cfg)
        costs = model_costs(cfg)
        assert (costs.params, costs.params_non_embedding) == (model.num_params(), model.num_params(exclude_embeddings=True))


def _measured(cfg: ModelConfig, T: int, backward: bool = False) -> tuple[float, float]:
    """(matmul FLOPs, attention FLOPs) per token as torch's FlopCounterMode counts them. The
    CPU's fused attention kernel is not counted; the math backend computes it as two bmm's, so
    the attention's share is the math backend's count minus the fused one's."""
    torch.manual_seed(0)
    model = GatedTransformer(cfg)
    x = torch.randint(0, cfg.vocab_size, (2, T))

    def count() -> float:
        counter = FlopCounterMode(display=False)
        with counter:
            out = model(x)
            if backward:
                out.float().square().mean().backward()
        return sum(counter.get_flop_counts()["Global"].values()) / x.numel()

    fused = count()
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        math_backend = count()
    return fused, math_backend - fused


@pytest.mark.parametrize("gate", [{}, {"position": "G1"}, {"position": "G1", "granularity": "headwise"}, {"position": "G5"}])
def test_forward_and_training_flops_match_torchs_flop_counter(gate):
    T = 32
    cfg = _cfg("tiny", gate)
    costs = model_costs(cfg)
    matmul, attention = _measured(cfg, T)
    assert attention > 0
    assert matmul == pytest.approx(2 * costs.matmul_params, rel=1e-9)
    # the counter counts the full T x T scores; a causal query sees (T + 1) / 2 keys on average
    assert attention * (T + 1) / (2 * T) == pytest.approx(costs.attention_flops(T), rel=1e-9)
    train_matmul, train_attention = _measured(cfg, T, backward=True)
    assert train_matmul == pytest.approx(3 * 2 * costs.matmul_params, rel=1e-9)
    assert train_matmul + train_attention * (T + 1) / (2 * T) == pytest.approx(costs.train_flops(T), rel=1e-9)


def test_the_g1_elementwise_gate_adds_a_d_by_d_projection_per_layer():
    base, g1 = model_costs(_cfg("small", {})), model_costs(_cfg("small", {"position": "G1"}))
    cfg = _cfg("small", {})
    assert g1.matmul_params - base.matmul_params == cfg.n_layers * cfg.d_model * cfg.n_heads * cfg.head_dim
    T = 256
    assert g1.train_flops(T) - base.train_flops(T) == pytest.approx(6 * cfg.n_layers * cfg.d_model * cfg.q_dim)
    assert 0.04 < g1.gate_flop_share(T) < 0.08 and base.gate_flop_share(T) == 0


@pytest.mark.parametrize("activation", ["sigmoid", "softplus", "2sigmoid"])
def test_the_gates_projection_costs_the_same_whatever_its_activation(activation):
    """Softplus and 2·sigmoid gates cost the sigmoid gate's matmul FLOPs; their pointwise cost
    (activation per score, one multiply per gated element) is counted apart, and is small."""
    T = 64
    sig = model_costs(_cfg("small", {"position": "G1", "granularity": "headwise"}))
    costs = model_costs(_cfg("small", {"position": "G1", "granularity": "headwise", "activation": activation}))
    assert costs.train_flops(T) == sig.train_flops(T) and costs.gate_flop_share(T) == sig.gate_flop_share(T)
    cfg = _cfg("small", {})
    per_layer = {"sigmoid": 4, "softplus": 4, "2sigmoid": 5}[activation] * cfg.n_heads + cfg.n_heads * cfg.head_dim
    assert costs.gate_pointwise_flops == cfg.n_layers * per_layer
    assert costs.gate_pointwise_flops < 0.001 * costs.forward_flops(T)  # why forward_flops leaves it out
    assert (
        model_costs(cfg).gate_pointwise_flops == 0
        and model_costs(_cfg("small", {"position": "G1", "kind": "silu"})).gate_pointwise_flops == 0
    )


def test_counting_needs_no_torch():
    import subprocess
    import sys

    code = (
        "import sys; from gatedmodels import ModelConfig; from gatedmodels.costs import model_costs; "
        "model_costs(ModelConfig.preset('moe-15a2b')); assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
