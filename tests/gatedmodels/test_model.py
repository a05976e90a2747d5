"""Model correctness on tiny shapes: parity, causality, GQA, batching, parameter counts, presets."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from gatedmodels import PRESETS, GateConfig, GatedTransformer, ModelConfig, build_meta
from gatedmodels.gates import gate_sites, score_shape
from gatedmodels.layers import rope_frequencies

from .reference import reference_logits


@pytest.fixture(autouse=True)
def _no_grad():
    with torch.no_grad():
        yield


ALL_GATES = [
    dict(position="none"),
    *[dict(position=p, granularity=g) for p in ("G1", "G2", "G3", "G4") for g in ("elementwise", "headwise")],
    *[dict(position=p, sharing="head_shared") for p in ("G1", "G2")],
    dict(position="G1", granularity="headwise", sharing="head_shared"),
    dict(position="G5"),
    dict(position="G1", mode="additive", activation="silu"),
    dict(position="G1", activation="silu"),
    dict(position="G1", activation="ns_sigmoid"),
    dict(position="G1", activation="softplus"),
    dict(position="G1", granularity="headwise", activation="softplus"),
    dict(position="G1", activation="2sigmoid"),
    dict(position="G3", granularity="headwise", activation="2sigmoid"),
    dict(position="G1", input_dependent=False),
    dict(position="G1", kind="rmsnorm"),
    dict(position="G1", kind="silu"),
]


def tiny(**over) -> ModelConfig:
    return ModelConfig.preset("tiny", vocab_size=97, **over)


def build(seed=0, **over) -> GatedTransformer:
    torch.manual_seed(seed)
    return GatedTransformer(tiny(**over)).eval()


def ids(B=3, T=12, V=97, seed=1):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


def plain_logits(model: GatedTransformer, x_BT: torch.Tensor) -> torch.Tensor:
    """The ungated model written with no gate code at all, on the same ops as the library."""
    cfg = model.cfg
    H, K, d = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    h = model.embed(x_BT)
    B, T, _ = h.shape
    for blk in model.blocks:
        a = blk.attn
        n = blk.attn_norm(h)
        q, k, v, _ = a.wqkv(n).split(a.split, dim=-1)
        q = a.rotary(a.q_norm(q.unflatten(-1, (H, d)))).transpose(1, 2)
        k = a.rotary(a.k_norm(k.unflatten(-1, (K, d)))).transpose(1, 2)
        v = v.unflatten(-1, (K, d)).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=K != H)
        h = h + a.wo(y.transpose(1, 2).reshape(B, T, H * d))
        h = h + blk.ffn(blk.ffn_norm(h))
    return F.linear(model.norm(h), model.embed.weight)


def test_gate_none_equals_model_without_gate_code_exactly():
    model = build()
    x = ids()
    assert torch.equal(model(x), plain_logits(model, x))


def test_additive_gate_with_zero_weights_equals_baseline():
    base = build()
    gated = GatedTransformer(tiny(gate=dict(position="G1", mode="additive", activation="silu"))).eval()
    state = {k: v for k, v in base.state_dict().items()}
    for i, blk in enumerate(gated.blocks):
        w = torch.zeros_like(blk.attn.wqkv.weight)
        w[: state[f"blocks.{i}.attn.wqkv.weight"].shape[0]] = state[f"blocks.{i}.attn.wqkv.weight"]
        state[f"blocks.{i}.attn.wqkv.weight"] = w
    gated.load_state_dict(state)
    x = ids()
    torch.testing.assert_close(gated(x), base(x), rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    "gate",
    [
        dict(position="none"),
        dict(position="G1"),
        dict(position="G1", granularity="headwise", activation="softplus"),
        dict(position="G1", activation="softplus"),
        dict(position="G1", granularity="headwise", activation="2sigmoid"),
    ],
    ids=lambda g: GateConfig(**g).label,
)
def test_matches_independent_reference(gate):
    model = build(gate=gate)
    for blk in model.blocks:  # 2sigmoid's rows start at zero: a gate of 1 everywhere would test nothing
        if blk.attn.S:
            blk.attn.wqkv.weight[-blk.attn.S :].normal_(std=0.5)
    x = ids(B=2, T=9)
    ours = model(x)
    for b in range(2):
        torch.testing.assert_close(ours[b], reference_logits(model, x[b]), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("gate", ALL_GATES, ids=lambda g: GateConfig(**g).label)
def test_causal(gate):
    model = build(gate=gate)
    x = ids(B=2, T=10)
    y = x.clone()
    y[:, 6:] = (y[:, 6:] + 5) % 97
    torch.testing.assert_close(model(x)[:, :6], model(y)[:, :6], rtol=0, atol=1e-6)
    assert not torch.allclose(model(x)[:, 6:], model(y)[:, 6:])


@pytest.mark.parametrize("gate", ALL_GATES, ids=lambda g: GateConfig(**g).label)
def test_batch_equals_rows_one_at_a_time(gate):
    model = build(gate=gate)
    x = ids(B=4, T=11)
    full = model(x)
    for b in range(4):
        torch.testing.assert_close(full[b : b + 1], model(x[b : b + 1]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("gate", ALL_GATES, ids=lambda g: GateConfig(**g).label)
def test_probe_pass_matches_training_pass(gate):
    model = build(gate=gate)
    x = ids()
    logits, probe = model.probe(x)
    torch.testing.assert_close(logits, model(x), rtol=1e-4, atol=1e-5)
    assert len(probe.layers) == model.cfg.n_layers
    for layer in probe.layers:
        B, H, T, S = layer.attn.shape
        assert (B, H, T, S) == (3, 4, 12, 12)
        torch.testing.assert_close(layer.attn.sum(-1), torch.ones(B, H, T))
        assert torch.all(layer.attn.triu(diagonal=1) == 0)
    expects_gate = gate["position"] != "none" and GateConfig(**gate).kind == "gate"
    assert bool(probe.gates) == expects_gate


def test_gqa_equals_mha_with_repeated_kv():
    gqa = build(n_heads=4, n_kv_heads=2, gate=dict(position="G1"))
    mha = GatedTransformer(tiny(n_heads=4, n_kv_heads=4, gate=dict(position="G1"))).eval()
    H, K, d = 4, 2, 16
    state = gqa.state_dict()
    for i in range(gqa.cfg.n_layers):
        key = f"blocks.{i}.attn.wqkv.weight"
        W = state[key]
        q, k, v, g = W.split([H * d, K * d, K * d, H * d])
        rep = lambda t: t.view(K, d, -1).repeat_interleave(H // K, dim=0).reshape(H * d, -1)
        state[key] = torch.cat([q, rep(k), rep(v), g])
    mha.load_state_dict(state)
    x = ids()
    torch.testing.assert_close(mha(x), gqa(x), rtol=1e-5, atol=1e-6)


def test_gradients_reach_gate_and_training_step_runs():
    with torch.enable_grad():
        model = GatedTransformer(tiny(gate=dict(position="G1"))).train()
        x = ids()
        loss = F.cross_entropy(model(x)[:, :-1].flatten(0, 1), x[:, 1:].flatten())
        loss.backward()
        S = model.blocks[0].attn.S
        assert model.blocks[0].attn.wqkv.weight.grad[-S:].abs().sum() > 0
        assert math.isfinite(loss.item())


def expected_gate_params(cfg: ModelConfig) -> int:
    """The paper's formula: a bias-free d_model x out linear per layer (REFERENCE §1)."""
    g = cfg.gate
    if g.position == "none" or g.kind == "silu":
        return 0
    if g.kind == "rmsnorm":
        return cfg.n_layers * cfg.head_dim
    heads = {"G1": cfg.n_heads, "G4": cfg.n_heads, "G2": cfg.n_kv_heads, "G3": cfg.n_kv_heads, "G5": 1}[g.position]
    width = cfg.d_model if g.position == "G5" else cfg.head_dim
    out = (heads if g.sharing == "head_specific" else 1) * (width if g.granularity == "elementwise" else 1)
    if not g.input_dependent:
        return cfg.n_layers * out  # a learned (h, w) parameter, not a projection
    return cfg.n_layers * cfg.d_model * out


@pytest.mark.parametrize("gate", ALL_GATES, ids=lambda g: GateConfig(**g).label)
def test_parameter_counts_match_formula(gate):
    base = build()
    model = build(gate=gate)
    cfg = model.cfg
    assert model.gate_params() == expected_gate_params(cfg)
    assert model.num_params() - base.num_params() == expected_gate_params(cfg)


def test_paper_parameter_figures():
    """G1 elementwise on the MoE model adds 24*2048*(32*128) = 201M; headwise 24*2048*32 = 1.6M."""
    el = build_meta(ModelConfig.preset("moe-15a2b", gate=dict(position="G1")))
    hw = build_meta(ModelConfig.preset("moe-15a2b", gate=dict(position="G1", granularity="headwise")))
    assert el.gate_params() == 24 * 2048 * 32 * 128 == 201_326_592
    assert hw.gate_params() == 24 * 2048 * 32 == 1_572_864
    g2 = build_meta(ModelConfig.preset("moe-15a2b", gate=dict(position="G2")))
    assert g2.gate_params() == 24 * 2048 * 4 * 128
    g5 = build_meta(ModelConfig.preset("moe-15a2b", gate=dict(position="G5")))
    assert g5.gate_params() == 24 * 2048 * 2048


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_builds(name):
    cfg = ModelConfig.preset(name)
    assert cfg.size == name
    model = build_meta(cfg)
    n = model.num_params()
    assert n > 0
    if name in ("tiny", "bigram-1l", "bigram-2l", "small"):
        real = GatedTransformer(cfg)
        assert real.num_params() == n
        real(torch.zeros(1, 5, dtype=torch.long))


def test_preset_sizes_are_what_their_names_say():
    assert 115e6 < build_meta(ModelConfig.preset("125m")).num_params() < 135e6
    assert 1.6e9 < build_meta(ModelConfig.preset("dense-1.7b")).num_params() < 1.8e9
    moe = build_meta(ModelConfig.preset("moe-15a2b"))
    assert 14e9 < moe.num_params() < 16.5e9
    assert 1.5e9 < moe.active_params() + 2 * 151936 * 2048 < 2.5e9


def test_gate_score_shapes_and_sharing():
    cfg = tiny(gate=dict(position="G1", sharing="head_shared"))
    assert score_shape(cfg.gate, gate_sites(cfg)["G1"]) == (1, 16)
    model = GatedTransformer(cfg).eval()
    _, probe = model.probe(ids())
    assert probe.gates[0].shape == (3, 12, 1, 16)
    cfg = tiny(gate=dict(position="G2", granularity="headwise"))
    _, probe = GatedTransformer(cfg).eval().probe(ids())
    assert probe.gates[0].shape == (3, 12, cfg.n_kv_heads, 1)


def test_input_independent_gate_starts_at_half_and_ns_sigmoid_is_non_sparse():
    _, probe = build(gate=dict(position="G1", input_dependent=False)).probe(ids())
    assert torch.all(probe.gates[0] == 0.5)
    model = build(gate=dict(position="G1", activation="ns_sigmoid"))
    with torch.no_grad():
        for blk in model.blocks:
            blk.attn.wqkv.weight[-blk.attn.S :].mul_(1000)
    _, probe = model.probe(ids())
    g = torch.cat([t.flatten() for t in probe.gates])
    assert g.min() >= 0.5 and g.max() <= 1.0


def test_2sigmoid_is_init_neutral_and_softplus_is_unbounded():
    """2·sigmoid's rows start at zero whatever init_std says, so the gated model starts as the
    ungated one with the same weights; softplus starts at ln 2 and exceeds 1 once scores grow."""
    torch.manual_seed(0)
    gated = GatedTransformer(tiny(gate=dict(position="G1", activation="2sigmoid", init_std=0.5))).eval()
    assert gated.cfg.gate.unused_fields() == ["init_std"] and gated.cfg.gate.normalized().init_std == 0.02
    base = build()
    state = dict(gated.state_dict())
    for i, blk in enumerate(gated.blocks):
        assert float(blk.attn.wqkv.weight[-blk.attn.S :].abs().max()) == 0.0
        state[f"blocks.{i}.attn.wqkv.weight"] = state[f"blocks.{i}.attn.wqkv.weight"][: -blk.attn.S]
    base.load_state_dict(state)
    x = ids()
    _, probe = gated.probe(x)
    assert all(torch.all(g == 1.0) for g in probe.gates)
    torch.testing.assert_close(gated(x), base(x), rtol=0, atol=1e-6)
    soft = build(gate=dict(position="G1", activation="softplus", input_dependent=False))
    assert all(torch.allclose(g, torch.full_like(g, math.log(2))) for g in soft.probe(x)[1].gates)
    soft = build(gate=dict(position="G1", activation="softplus"))
    for blk in soft.blocks:
        blk.attn.wqkv.weight[-blk.attn.S :].mul_(200)
    g = torch.cat([t.flatten() for t in soft.probe(x)[1].gates])
    assert g.min() >= 0 and g.max() > 2.0 and float((g > 1).float().mean()) > 0.2


def test_moe_runs_with_balancing_loss():
    torch.manual_seed(0)
    cfg = tiny(moe=dict(n_experts=4, top_k=2, expert_dim=32))
    model = GatedTransformer(cfg)
    x = ids()
    with torch.enable_grad():
        logits = model(x)
        aux = model.aux_loss()
        (logits.sum() * 0 + aux).backward()
    # per layer E * sum f_i P_i is 1 at perfect balance, near 1 at init; summed over layers
    per_layer = aux.item() / cfg.moe.aux_loss_coef / cfg.n_layers
    assert 0.9 < per_layer < 1.5
    assert model.blocks[0].ffn.router.weight.grad.abs().sum() > 0
    # the paper's "more experts" baseline is a config change
    assert build_meta(tiny(moe=dict(n_experts=8, top_k=2, expert_dim=32))).num_params() > model.num_params()


def test_learned_positions_and_nope():
    for pe in ("learned", "nope"):
        model = build(position_encoding=pe)
        assert model(ids()).shape == (3, 12, 97)
    with pytest.raises(ValueError, match="max_seq_len"):
        build(position_encoding="learned", max_seq_len=8)(ids(T=12))


def test_yarn_frequencies():
    from gatedmodels import RopeConfig

    plain, s1 = rope_frequencies(64, RopeConfig())
    same, s2 = rope_frequencies(64, RopeConfig(scaling="yarn", factor=1.0))
    assert torch.equal(plain, same) and s1 == s2 == 1.0
    yarn, scale = rope_frequencies(64, RopeConfig(scaling="yarn", factor=4.0, original_max_len=256))
    assert scale == pytest.approx(0.1 * math.log(4) + 1)
    assert yarn[0] == plain[0]  # fastest-rotating dimension is extrapolated (kept)
    torch.testing.assert_close(yarn[-1], plain[-1] / 4)  # slowest is interpolated by the factor
    assert torch.all(yarn <= plain + 1e-12)
    model = build(rope=dict(scaling="yarn", factor=4.0, original_max_len=8))
    assert torch.isfinite(model(ids(T=32))).all()


def test_rope_override_changes_positions_only_inside_the_context():
    from gatedmodels import RopeConfig, rope_override

    model = build()
    x = ids(T=40)
    before = model(x)
    with rope_override(model, RopeConfig(scaling="yarn", factor=4.0, original_max_len=16)):
        scaled = model(x)
    assert not torch.allclose(before, scaled)
    torch.testing.assert_close(model(x), before, rtol=0, atol=0)
    with rope_override(model, RopeConfig()):  # the trained settings: identical output
        torch.testing.assert_close(model(x), before, rtol=0, atol=0)
