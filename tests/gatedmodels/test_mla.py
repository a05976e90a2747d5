"""Multi-head latent attention (`attention.kind: mla`, gatedmodels.mla) against transformers'
DeepSeek-V3 with copied weights: the attention layer alone (with and without a query latent,
rotate-half and DeepSeek's interleaved RoPE), the whole decoder, Kimi-K3's gate before o_proj;
then every gate position and activation on it, the probe path, causality, the config rules and
the counted parameters and FLOPs."""

from __future__ import annotations

import pytest
import torch
import transformers  # a test dependency (pyproject dev extras)
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds

from gatedmodels import ConfigError, GatedTransformer, ModelConfig, build_meta
from gatedmodels.costs import model_costs
from gatedmodels.mla import LatentAttention
from gatedmodels.probes import LayerProbe

D, H, d, R = 32, 4, 8, 4  # d_model, heads, head_dim (nope and value), RoPE width
BASE = dict(vocab_size=61, d_model=D, n_layers=2, n_heads=H, n_kv_heads=H, head_dim=d, ffn_dim=40, qk_norm=False, init_std=0.2)
TOL = 2e-5
"""fp32, same weights: max |Δ| of layer outputs / logits (measured ~1e-6 at |y| ~ 1-5)."""


def mla_cfg(q_rank: int = 12, gate: dict | None = None, **over) -> ModelConfig:
    attention = {"kind": "mla", "mla_q_rank": q_rank, "mla_kv_rank": 16, "mla_rope_dim": R}
    return ModelConfig.from_dict({**BASE, "attention": attention, "gate": gate or {"position": "none"}, **over})


def ds_config(cfg: ModelConfig, *, interleave: bool = False, tied: bool = False) -> transformers.DeepseekV3Config:
    a = cfg.attention
    return transformers.DeepseekV3Config(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.d_model,
        intermediate_size=cfg.ffn_dim,
        num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.n_heads,
        q_lora_rank=a.mla_q_rank or None,
        kv_lora_rank=a.mla_kv_rank,
        qk_rope_head_dim=a.mla_rope_dim,
        qk_nope_head_dim=cfg.head_dim,
        v_head_dim=cfg.head_dim,
        first_k_dense_replace=cfg.n_layers,  # every layer a dense SwiGLU, as gatesweep's
        num_mtp_layers=0,
        rope_interleave=interleave,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope.base},
        rms_norm_eps=cfg.norm_eps,
        tie_word_embeddings=tied,
        max_position_embeddings=64,
    )


def interleave_perm(r: int) -> torch.Tensor:
    """DeepSeek's interleaved RoPE reads pairs (0, 1), (2, 3), ... and writes them rotate-half
    style, so it is rotate-half on the rows permuted to [0, 2, 4, ..., 1, 3, 5, ...]."""
    return torch.cat([torch.arange(0, r, 2), torch.arange(1, r, 2)])


def hf_attention_state(layer: LatentAttention, cfg: ModelConfig, interleave: bool = False) -> dict[str, torch.Tensor]:
    """gatesweep's MLA weights under DeepseekV3Attention's names (rows in its order)."""
    a = cfg.attention
    Rq = a.mla_q_rank or H * (d + R)
    wq, wkv_a, wkr, _ = layer.wqkv.weight.detach().split([Rq, a.mla_kv_rank, R, layer.S])
    q_up = layer.wq_b.weight.detach() if a.mla_q_rank else wq
    if interleave:  # undo the permutation DeepSeek's interleaved RoPE applies to the RoPE rows
        inverse = torch.argsort(interleave_perm(R))
        q_up = q_up.view(H, d + R, -1)
        q_up = torch.cat([q_up[:, :d], q_up[:, d:][:, inverse]], dim=1).reshape(H * (d + R), -1)
        wkr = wkr[inverse]
    out = {"kv_a_proj_with_mqa.weight": torch.cat([wkv_a, wkr]), "kv_a_layernorm.weight": layer.kv_norm.weight.detach()}
    out.update({"kv_b_proj.weight": layer.wkv_b.weight.detach(), "o_proj.weight": layer.wo.weight.detach()})
    if a.mla_q_rank:
        out.update({"q_a_proj.weight": wq, "q_a_layernorm.weight": layer.q_norm.weight.detach(), "q_b_proj.weight": q_up})
    else:
        out["q_proj.weight"] = q_up
    return out


def randomise(model: torch.nn.Module, seed: int = 3) -> None:
    """Norm weights away from 1, so a norm mapped wrongly shows."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g))


def causal_mask(T: int) -> torch.Tensor:
    return torch.full((T, T), float("-inf")).triu(1)[None, None]


def run_hf_attention(cfg, layer, x, *, interleave=False, gate=None):
    config = ds_config(cfg, interleave=interleave)
    config._attn_implementation = "eager"
    attn = ds.DeepseekV3Attention(config, layer_idx=0).eval()
    attn.load_state_dict(hf_attention_state(layer, cfg, interleave), strict=True)
    if gate is not None:  # Kimi-K3: the attention output times sigmoid(x W_g), before o_proj
        attn.o_proj.register_forward_pre_hook(lambda _m, args: (args[0] * gate,))
    rotary = ds.DeepseekV3RotaryEmbedding(config)
    pos = torch.arange(x.shape[1])[None]
    with torch.no_grad():
        return attn(x, rotary(x, pos), causal_mask(x.shape[1]))[0]


@pytest.mark.parametrize("interleave", [False, True], ids=["rotate-half", "interleaved"])
@pytest.mark.parametrize("q_rank", [12, 0], ids=["q-latent", "full-rank-q"])
def test_the_layer_equals_deepseek_v3_attention(q_rank, interleave):
    torch.manual_seed(0)
    cfg = mla_cfg(q_rank)
    layer = LatentAttention(cfg).eval()
    randomise(layer)
    x = torch.randn(2, 11, D)
    with torch.no_grad():
        ours = layer(x)
    theirs = run_hf_attention(cfg, layer, x, interleave=interleave)
    assert ours.abs().max() > 0.1
    assert float((ours - theirs).abs().max()) <= TOL


def test_a_wrong_row_order_would_show():
    """The comparison can fail: read without undoing the interleaving, the layers differ."""
    torch.manual_seed(0)
    cfg = mla_cfg()
    layer = LatentAttention(cfg).eval()
    x = torch.randn(2, 11, D)
    config = ds_config(cfg, interleave=True)
    config._attn_implementation = "eager"
    attn = ds.DeepseekV3Attention(config, 0).eval()
    attn.load_state_dict(hf_attention_state(layer, cfg, interleave=False))
    with torch.no_grad():
        theirs = attn(x, ds.DeepseekV3RotaryEmbedding(config)(x, torch.arange(11)[None]), causal_mask(11))[0]
        assert float((layer(x) - theirs).abs().max()) > 1e-3


@pytest.mark.parametrize("activation", ["sigmoid", "softplus", "2sigmoid"])
@pytest.mark.parametrize("granularity", ["elementwise", "headwise"])
def test_kimi_k3s_output_gate_is_g1_on_mla(granularity, activation):
    """DeepseekV3Attention with act(x W_g) multiplied in before o_proj (Kimi-K3's gated MLA)."""
    torch.manual_seed(1)
    cfg = mla_cfg(gate={"position": "G1", "granularity": granularity, "activation": activation, "init_std": 0.3})
    layer = LatentAttention(cfg).eval()
    randomise(layer)
    with torch.no_grad():
        layer.wqkv.weight[-layer.S :].normal_(std=0.3)  # 2sigmoid starts at zero: give every gate something to do
    x = torch.randn(2, 9, D)
    act = {"sigmoid": torch.sigmoid, "softplus": torch.nn.functional.softplus, "2sigmoid": lambda s: 2 * torch.sigmoid(s)}[activation]
    g = act(x @ layer.wqkv.weight[-layer.S :].detach().T)  # (B, T, H·d) or (B, T, H)
    gate = g if granularity == "elementwise" else g.repeat_interleave(d, dim=-1)
    with torch.no_grad():
        ours, ungated = layer(x), run_hf_attention(cfg, layer, x)
    theirs = run_hf_attention(cfg, layer, x, gate=gate)
    assert float((ours - theirs).abs().max()) <= TOL
    assert float((ours - ungated).abs().max()) > 1e-2


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_the_decoder_equals_deepseek_v3_for_causal_lm(tied):
    torch.manual_seed(2)
    cfg = mla_cfg(tie_embeddings=tied)
    model = GatedTransformer(cfg).eval()
    randomise(model)
    config = ds_config(cfg, tied=tied)
    hf = transformers.DeepseekV3ForCausalLM(config).eval()
    state = {"model.embed_tokens.weight": model.embed.weight, "model.norm.weight": model.norm.weight}
    if not tied:
        state["lm_head.weight"] = model.lm_head.weight
    for i, block in enumerate(model.blocks):
        p = f"model.layers.{i}."
        state.update({p + "self_attn." + k: v for k, v in hf_attention_state(block.attn, cfg).items()})
        w1, w3 = block.ffn.w13.weight.chunk(2)
        state.update({p + "mlp.gate_proj.weight": w1, p + "mlp.up_proj.weight": w3, p + "mlp.down_proj.weight": block.ffn.w2.weight})
        state.update({p + "input_layernorm.weight": block.attn_norm.weight, p + "post_attention_layernorm.weight": block.ffn_norm.weight})
    missing, unexpected = hf.load_state_dict({k: v.detach() for k, v in state.items()}, strict=False)
    assert not unexpected and all(k == "lm_head.weight" for k in missing)  # a tied head is the embedding
    x = torch.randint(0, cfg.vocab_size, (2, 17))
    with torch.no_grad():
        ours, theirs = model(x), hf(x).logits
    assert ours.abs().max() > 1.0
    assert float((ours - theirs).abs().max()) <= TOL


def test_init_neutral_2sigmoid_gate_starts_as_the_ungated_layer():
    torch.manual_seed(4)
    gated = GatedTransformer(mla_cfg(gate={"position": "G1", "activation": "2sigmoid"})).eval()
    plain = GatedTransformer(mla_cfg()).eval()
    state = {k: v.clone() for k, v in gated.state_dict().items()}
    for i, block in enumerate(gated.blocks):
        assert float(block.attn.wqkv.weight[-block.attn.S :].detach().abs().max()) == 0.0
        state[f"blocks.{i}.attn.wqkv.weight"] = state[f"blocks.{i}.attn.wqkv.weight"][: -block.attn.S]
    plain.load_state_dict(state)
    x = torch.randint(0, 61, (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(gated(x), plain(x), rtol=0, atol=1e-6)


GATES = [
    {"position": "G1"},
    {"position": "G1", "granularity": "headwise", "activation": "softplus"},
    {"position": "G1", "sharing": "head_shared", "activation": "2sigmoid"},
    {"position": "G2", "activation": "silu"},
    {"position": "G3", "granularity": "headwise"},
    {"position": "G4", "activation": "ns_sigmoid"},
    {"position": "G5", "activation": "softplus"},
    {"position": "G1", "mode": "additive", "activation": "silu"},
    {"position": "G1", "input_dependent": False, "activation": "2sigmoid"},
    {"position": "G1", "kind": "rmsnorm"},
    {"position": "G1", "kind": "silu"},
]


@pytest.mark.parametrize("gate", GATES, ids=lambda g: "-".join(map(str, g.values())))
def test_every_gate_composes_with_mla(gate):
    torch.manual_seed(5)
    cfg = mla_cfg(gate=gate)
    model = GatedTransformer(cfg)
    x = torch.randint(0, 61, (2, 10))
    with torch.no_grad():
        logits, probe = model.eval().probe(x)
        torch.testing.assert_close(logits, model(x), rtol=1e-4, atol=1e-5)
        y = x.clone()
        y[:, 6:] = (y[:, 6:] + 3) % 61
        torch.testing.assert_close(model(y)[:, :6], logits[:, :6], rtol=0, atol=1e-5)  # causal
    assert len(probe.attn) == cfg.n_layers and probe.attn[0].shape == (2, H, 10, 10)
    assert torch.allclose(probe.attn[0].sum(-1), torch.ones(2, H, 10))
    assert bool(probe.gates) == (gate.get("kind", "gate") == "gate")
    model.train()
    loss = model(x).square().mean()
    loss.backward()
    assert all(p.grad is not None and float(p.grad.abs().sum()) > 0 for n, p in model.named_parameters() if "wqkv" in n or "wkv_b" in n)
    costs = model_costs(cfg)
    assert costs.params == model.num_params() and costs.params_gate == model.gate_params()


@pytest.mark.parametrize(
    "over,field,why",
    [
        ({"mla_kv_rank": 33}, "attention.mla_kv_rank", "wider than d_model compresses nothing; allowed: <= 32"),
        ({"mla_q_rank": 64}, "attention.mla_q_rank", "allowed: <= 32"),
        ({"mla_kv_rank": 0}, "mla_kv_rank", "allowed: >= 1"),
        ({"mla_rope_dim": 3}, "attention.mla_rope_dim", "even width"),
        ({"mla_q_rank": -1}, "mla_q_rank", "allowed: >= 0"),
    ],
)
def test_impossible_mla_settings_are_refused_naming_the_field(over, field, why):
    with pytest.raises(ConfigError) as err:
        ModelConfig.from_dict({**BASE, "attention": {"kind": "mla", **over}})
    assert field in str(err.value) and why in str(err.value)


def test_mla_refuses_kv_heads_and_qk_norm_it_would_ignore():
    with pytest.raises(ConfigError, match=r"n_kv_heads.*per query head"):
        ModelConfig.from_dict({**BASE, "n_kv_heads": 2, "attention": {"kind": "mla"}})
    with pytest.raises(ConfigError, match=r"qk_norm.*latents"):
        ModelConfig.from_dict({**BASE, "qk_norm": True, "attention": {"kind": "mla"}})
    cfg = ModelConfig.from_dict({**BASE, "position_encoding": "learned", "attention": {"kind": "mla", "mla_rope_dim": 0}})
    assert GatedTransformer(cfg)(torch.randint(0, 61, (1, 5))).shape == (1, 5, 61)  # no RoPE: no RoPE part needed


def test_mla_fields_reset_for_other_kinds_and_a_wide_rank_is_valid_only_for_mla():
    cfg = ModelConfig.from_dict({**BASE, "attention": {"kind": "softmax", "mla_kv_rank": 999}})
    assert cfg.attention.normalized().mla_kv_rank == 32


@pytest.mark.parametrize("q_rank", [0, 12])
def test_mla_flops_match_torchs_flop_counter(q_rank):
    from torch.utils.flop_counter import FlopCounterMode

    cfg = mla_cfg(q_rank, gate={"position": "G1", "activation": "softplus"})
    costs = model_costs(cfg)
    model = GatedTransformer(cfg)
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear)) + model.embed.weight.numel()
    assert costs.matmul_params == linear and costs.params == build_meta(cfg).num_params()
    T = 16
    x = torch.randint(0, 61, (2, T))

    def count() -> float:
        counter = FlopCounterMode(display=False)
        with counter:
            model(x)
        return sum(counter.get_flop_counts()["Global"].values()) / x.numel()

    # SDPA with values narrower than the keys runs its math path on a CPU, which the counter
    # sees: two bmm's over the full T x T scores besides the projections
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        attention = count() - 2 * costs.matmul_params
    assert attention > 0
    assert attention * (T + 1) / (2 * T) == pytest.approx(costs.attention_flops(T), rel=1e-9)
    assert costs.attention_flops(T) == pytest.approx(2 * cfg.n_layers * H * ((d + R) + d) * (T + 1) / 2)
    layer = LatentAttention(cfg)
    rec = LayerProbe()
    with torch.no_grad():
        layer(torch.randn(1, 4, D), rec)
    assert rec.attn is not None and rec.gate is not None and rec.values.shape == (1, 4, H, d)


def test_rope_override_swaps_the_decoupled_rope_only_and_restores_it():
    from gatedmodels import RopeConfig
    from gatedmodels.model import rope_override

    torch.manual_seed(6)
    model = GatedTransformer(mla_cfg(gate={"position": "G1"})).eval()
    x = torch.randint(0, 61, (1, 20))
    with torch.no_grad():
        before = model(x)
        with rope_override(model, RopeConfig(base=50.0)) as m:
            assert all(b.attn.rotary.inv_freq.numel() == R // 2 for b in m.blocks)  # the RoPE key's width, not head_dim
            during = model(x)
        after = model(x)
    assert float((during - before).abs().max()) > 1e-3
    assert torch.equal(after, before)
