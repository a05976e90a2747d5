"""Attention kinds (softmax and the attention-sink remedies): each against a naive reference,
fused path against probe path (values and gradients), causality, batching, parameter counts,
composition with the gates and the config rules."""

from __future__ import annotations

import math

import pytest
import torch

from gatedmodels import ATTENTION_KINDS, AttentionConfig, ConfigError, GatedTransformer, ModelConfig, sink_slot_mass
from gatedmodels.attention_kinds import ATTENTION_KINDS as REGISTRY
from gatedmodels.attention_kinds import build_attention_kind
from gatedmodels.probes import LayerProbe, first_token_attention

KINDS = [k for k in ATTENTION_KINDS if k != "mla"]
"""The kinds that keep the layer's projections (MLA brings its own: tests/gatedmodels/test_mla.py;
its kernel is checked against the reference below)."""
SINK_KINDS = ("softmax1", "learned_sink", "key_bias")


def tiny(kind: str = "softmax", gate: dict | None = None, **attention) -> ModelConfig:
    return ModelConfig.preset("tiny", vocab_size=97, gate=gate or {"position": "none"}, attention={"kind": kind, **attention})


def randomise_kind_params(module: torch.nn.Module, seed: int = 5) -> None:
    """Non-zero sink logits and sink keys, so that the kinds differ from softmax1 (their init)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 1.5)


def build(kind: str, seed: int = 0, gate: dict | None = None, **attention) -> GatedTransformer:
    torch.manual_seed(seed)
    model = GatedTransformer(tiny(kind, gate, **attention)).eval()
    for block in model.blocks:
        randomise_kind_params(block.attn.kernel, seed)
    return model


def ids(B=3, T=12, V=97, seed=1):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


def naive_attention(kind, q, k, v, *, sinks=None, sink_keys=None, eps=1e-6, bias=0.0):
    """Loops over batch, head and query, in float64, from each kind's formula.
    Returns (output (B, H, T, d), weights on the keys (B, H, T, T), sink share (B, H, T))."""
    q, k, v = q.double(), k.double(), v.double()
    B, H, T, d = q.shape
    K = k.shape[1]
    out = torch.zeros(B, H, T, d, dtype=torch.float64)
    weights = torch.zeros(B, H, T, T, dtype=torch.float64)
    share = torch.zeros(B, H, T, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            kv = h // (H // K)
            for i in range(T):
                x = [float(q[b, h, i] @ k[b, kv, j]) / math.sqrt(d) for j in range(i + 1)]
                e = [math.exp(xj) for xj in x]
                slot = None
                if kind == "softmax":
                    w = [ej / sum(e) for ej in e]
                elif kind in SINK_KINDS:
                    if kind == "softmax1":
                        s = 0.0
                    elif kind == "learned_sink":
                        s = float(sinks[h].detach())
                    else:
                        s = float(q[b, h, i] @ sink_keys[kv].detach().double()) / math.sqrt(d)
                    z = math.exp(s) + sum(e)
                    w = [ej / z for ej in e]
                    slot = math.exp(s) / z
                elif kind == "softpick":
                    z = sum(abs(ej - 1.0) for ej in e) + eps
                    w = [max(ej - 1.0, 0.0) / z for ej in e]
                elif kind == "sigmoid":
                    w = [1.0 / (1.0 + math.exp(-(xj + bias))) for xj in x]
                else:
                    raise AssertionError(kind)
                for j, wj in enumerate(w):
                    weights[b, h, i, j] = wj
                    out[b, h, i] += wj * v[b, kv, j]
                if slot is not None:
                    share[b, h, i] = slot
    return out, weights, share


def qkv(B=2, H=4, K=2, T=9, d=16, seed=0, scale=1.5):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, d, generator=g) * scale
    k = torch.randn(B, K, T, d, generator=g) * scale
    v = torch.randn(B, K, T, d, generator=g)
    return q, k, v


def test_registry_covers_the_config_literal():
    assert set(REGISTRY) == set(ATTENTION_KINDS) == {"softmax", "softmax1", "learned_sink", "softpick", "sigmoid", "key_bias", "mla"}


def test_the_mla_kernel_is_softmax_over_its_wider_queries_and_keys():
    """MLA's kernel: a key and value per query head, the scale 1 / sqrt(head_dim + mla_rope_dim)."""
    cfg = ModelConfig.preset("tiny", n_kv_heads=4, qk_norm=False, attention={"kind": "mla", "mla_rope_dim": 8})
    mod = build_attention_kind(cfg)
    q, k, v = qkv(H=4, K=4, d=cfg.head_dim + 8)
    ref, ref_w, _ = naive_attention("softmax", q, k, v)
    with torch.no_grad():
        fused = mod(q, k, v[..., : cfg.head_dim])  # values are head_dim wide
        rec = LayerProbe()
        explicit = mod.explicit(q, k, v, rec)
    torch.testing.assert_close(fused.double(), ref[..., : cfg.head_dim], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(explicit.double(), ref, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(rec.attn.double(), ref_w, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_kind_matches_naive_reference(kind):
    """Fused (training) path and explicit (probe) path both equal the formula, GQA included."""
    cfg = tiny(kind, sigmoid_bias=-0.5 if kind == "sigmoid" else 0.0)
    mod = build_attention_kind(cfg)
    randomise_kind_params(mod)
    q, k, v = qkv(H=cfg.n_heads, K=cfg.n_kv_heads, d=cfg.head_dim)
    ref, ref_w, ref_share = naive_attention(
        kind,
        q,
        k,
        v,
        sinks=getattr(mod, "sinks", None),
        sink_keys=getattr(mod, "sink_keys", None),
        bias=cfg.attention.sigmoid_bias,
        eps=cfg.attention.softpick_eps,
    )
    with torch.no_grad():
        fused = mod(q, k, v)
        rec = LayerProbe()
        explicit = mod.explicit(q, k, v, rec)
    torch.testing.assert_close(fused.double(), ref, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(explicit.double(), ref, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(rec.attn.double(), ref_w, rtol=1e-4, atol=1e-6)
    if kind in SINK_KINDS:
        torch.testing.assert_close(rec.sink.double(), ref_share, rtol=1e-4, atol=1e-6)
        # the slot and the keys share one softmax
        torch.testing.assert_close(rec.attn.sum(-1) + rec.sink, torch.ones_like(rec.sink))
    else:
        assert rec.sink is None


def test_kinds_differ_from_each_other():
    """The reference comparison means something only if the kinds give different outputs."""
    q, k, v = qkv()
    outs = {}
    for kind in KINDS:
        mod = build_attention_kind(tiny(kind))
        randomise_kind_params(mod)
        with torch.no_grad():
            outs[kind] = mod(q, k, v)
    for a in KINDS:
        for b in KINDS:
            if a < b:
                assert not torch.allclose(outs[a], outs[b], atol=1e-3), (a, b)


@pytest.mark.parametrize("kind", KINDS)
def test_fused_gradients_match_explicit_gradients(kind):
    """The SDPA formulation of the sink kinds (extra slot, extra dimension) trains like the formula."""
    cfg = tiny(kind)
    mod = build_attention_kind(cfg)
    randomise_kind_params(mod)
    grads = []
    for path in ("fused", "explicit"):
        q, k, v = (t.requires_grad_() for t in qkv())
        mod.zero_grad()
        y = mod(q, k, v) if path == "fused" else mod.explicit(q, k, v, LayerProbe())
        (y * torch.linspace(-1, 1, y.shape[-1])).sum().backward()
        grads.append([q.grad, k.grad, v.grad, *[p.grad for p in mod.parameters()]])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    if kind in ("learned_sink", "key_bias"):
        assert all(float(p.grad.abs().sum()) > 0 for p in mod.parameters())


@pytest.mark.parametrize("kind", KINDS)
def test_causal(kind):
    model = build(kind)
    x = ids(B=2, T=10)
    y = x.clone()
    y[:, 6:] = (y[:, 6:] + 5) % 97
    with torch.no_grad():
        torch.testing.assert_close(model(x)[:, :6], model(y)[:, :6], rtol=0, atol=1e-6)
        assert not torch.allclose(model(x)[:, 6:], model(y)[:, 6:])
        _, px = model.probe(x)
        _, py = model.probe(y)
    for ax, ay in zip(px.attn, py.attn):
        torch.testing.assert_close(ax[:, :, :6, :6], ay[:, :, :6, :6], rtol=0, atol=1e-6)
        assert float(ax.triu(1).abs().max()) == 0.0  # no weight on future keys


@pytest.mark.parametrize("kind", KINDS)
def test_batch_equals_rows_one_at_a_time(kind):
    model = build(kind)
    x = ids(B=4, T=11)
    with torch.no_grad():
        full = model(x)
        for b in range(4):
            torch.testing.assert_close(full[b : b + 1], model(x[b : b + 1]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_probe_pass_matches_training_pass(kind):
    model = build(kind)
    x = ids()
    with torch.no_grad():
        logits, probe = model.probe(x)
        torch.testing.assert_close(logits, model(x), rtol=1e-4, atol=1e-5)
    assert len(probe.attn) == model.cfg.n_layers
    assert len(probe.sinks) == (model.cfg.n_layers if kind in SINK_KINDS else 0)


@pytest.mark.parametrize("kind", KINDS)
def test_parameter_counts(kind):
    torch.manual_seed(0)
    base = GatedTransformer(tiny("softmax"))
    model = GatedTransformer(tiny(kind))
    cfg = model.cfg
    per_layer = {"learned_sink": cfg.n_heads, "key_bias": cfg.n_kv_heads * cfg.head_dim}.get(kind, 0)
    assert model.attention_params() == cfg.n_layers * per_layer
    assert model.num_params() - base.num_params() == cfg.n_layers * per_layer
    assert model.gate_params() == 0
    names = {n for n, _ in model.named_parameters()}
    base_names = {n for n, _ in base.named_parameters()}
    assert base_names <= names  # every kind keeps the baseline's parameter names
    extra = sorted(names - base_names)
    expected = {"learned_sink": "sinks", "key_bias": "sink_keys"}.get(kind)
    assert extra == ([f"blocks.{i}.attn.kernel.{expected}" for i in range(cfg.n_layers)] if expected else [])


def test_default_softmax_keeps_state_dict_and_config_dict():
    """The default kind adds no parameter or buffer: export/import sees the same state dict."""
    torch.manual_seed(0)
    model = GatedTransformer(ModelConfig.preset("tiny"))
    assert not any(".kernel." in k for k in model.state_dict())
    assert ModelConfig.preset("tiny").attention == AttentionConfig()


def test_sink_inits():
    torch.manual_seed(0)
    model = GatedTransformer(tiny("learned_sink", sink_init=2.0))
    assert all(float(b.attn.kernel.sinks.min()) == float(b.attn.kernel.sinks.max()) == 2.0 for b in model.blocks)
    model = GatedTransformer(tiny("key_bias"))
    assert all(float(b.attn.kernel.sink_keys.abs().sum()) == 0.0 for b in model.blocks)


@pytest.mark.parametrize(
    "gate",
    [
        dict(position="G1"),
        dict(position="G1", granularity="headwise"),
        dict(position="G2"),
        dict(position="G3"),
        dict(position="G4", granularity="headwise"),
        dict(position="G5"),
        dict(position="G1", input_dependent=False),
        dict(position="G1", kind="silu"),
    ],
    ids=str,
)
@pytest.mark.parametrize("kind", KINDS)
def test_kinds_compose_with_gates(kind, gate):
    model = build(kind, gate=gate)
    x = ids(B=2, T=8)
    with torch.no_grad():
        logits, probe = model.probe(x)
        torch.testing.assert_close(logits, model(x), rtol=1e-4, atol=1e-5)
    assert probe.gates or gate.get("kind") == "silu"


@pytest.mark.parametrize("kind", SINK_KINDS)
def test_sink_kinds_refuse_the_g1_rmsnorm_control(kind):
    with pytest.raises(ConfigError, match="attention.kind") as err:
        tiny(kind, gate={"position": "G1", "kind": "rmsnorm"})
    assert "softmax + rmsnorm" in str(err.value)


@pytest.mark.parametrize("kind", SINK_KINDS)
def test_the_refused_combination_would_be_softmax_plus_rmsnorm(kind):
    """Why it is refused: RMSNorm divides out the sink kinds' per-(query, head) scale."""
    from gatedmodels.gates import HeadNorm, gate_sites

    cfg = tiny(kind)
    mod, soft = build_attention_kind(cfg), build_attention_kind(tiny("softmax"))
    randomise_kind_params(mod)
    norm = HeadNorm(cfg.gate, gate_sites(cfg)["G1"], eps=1e-12)
    q, k, v = qkv()
    with torch.no_grad():
        torch.testing.assert_close(norm(mod(q, k, v), None, None), norm(soft(q, k, v), None, None), rtol=1e-4, atol=1e-4)


def test_unknown_kind_names_the_allowed_values():
    with pytest.raises(ConfigError, match="softpick"):
        ModelConfig.from_dict({"size": "tiny", "attention": {"kind": "softmax2"}})
    with pytest.raises(ConfigError, match="softpick_eps"):
        AttentionConfig(kind="softpick", softpick_eps=0.0)


def test_normalized_resets_fields_that_do_not_apply():
    assert AttentionConfig(kind="softmax", sink_init=3.0).normalized() == AttentionConfig()
    assert AttentionConfig(kind="learned_sink", sink_init=3.0).normalized().sink_init == 3.0


def test_softpick_can_attend_to_nothing_and_sigmoid_is_not_normalised():
    """The properties the remedies rest on: softpick rows of non-positive scores are all zero
    (no forced mass, so no sink); sigmoid rows do not sum to 1."""
    q, k, v = qkv(T=6)
    sp = build_attention_kind(tiny("softpick"))
    rec = LayerProbe()
    with torch.no_grad():
        y = sp.explicit(-q.abs(), k.abs(), v, rec)  # every score <= 0
    assert float(rec.attn.abs().max()) == 0.0 and float(y.abs().max()) == 0.0
    sg = build_attention_kind(tiny("sigmoid"))
    rec = LayerProbe()
    with torch.no_grad():
        sg.explicit(q, k, v, rec)
    sums = rec.attn.sum(-1)
    assert float((sums - 1).abs().max()) > 0.5


def test_sink_slot_mass_reports_the_slot_apart_from_first_token_attention():
    model = build("learned_sink")
    for block in model.blocks:
        block.attn.kernel.sinks.data.fill_(20.0)  # the slot takes nearly everything
    _, probe = model.probe(ids())
    mass = sink_slot_mass(probe.sinks)
    assert mass is not None and mass[0] > 0.99 and len(mass[1]) == model.cfg.n_layers
    assert first_token_attention(probe.attn)[0] < 0.01
    _, probe = build("softmax").probe(ids())
    assert sink_slot_mass(probe.sinks) is None


@pytest.mark.parametrize("kind", KINDS)
def test_a_training_step_reduces_the_loss(kind):
    model = build(kind).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    x = ids(B=4, T=16)
    losses = []
    for _ in range(5):
        logits = model(x[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    assert losses[-1] < losses[0]
