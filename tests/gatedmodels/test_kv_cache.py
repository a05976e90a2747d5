"""KV-cached generation (gatedmodels.kv_cache, gatedmodels.generation): for every attention kind and
gate position, and the other model options that change what is cached or where (RoPE with YaRN,
learned and no positions, MoE, GQA, the G1 controls), the cached logits equal the full forward's
at every step, left-padded rows of a batch included, and greedy generation gives the same tokens.
Then the bookkeeping: rows that stop leave the batch, the cache refuses to overflow, a kind without
a cache path is refused by name."""

from __future__ import annotations

import pytest
import torch

from gatedmodels import KV_CACHE_KINDS, GatedTransformer, ModelConfig, RopeConfig, rope_override
from gatedmodels.attention_kinds import ATTENTION_KINDS as REGISTRY
from gatedmodels.attention_kinds import AttentionKind, Softmax
from gatedmodels.config import ATTENTION_KINDS
from gatedmodels.generation import generate_greedy
from gatedmodels.kv_cache import NoCachePath
from tests.support.models import tiny_config

V = 97
BOS = 96
POSITIONS = ("none", "G1", "G2", "G3", "G4", "G5")


def build(kind: str = "softmax", position: str = "none", seed: int = 0, **overrides) -> GatedTransformer:
    """A tiny model with weights large enough (init_std 0.3) that greedy choices are clear, the
    kind's own parameters (sink logits, sink keys) and constant gates non-zero."""
    torch.manual_seed(seed)
    gate = overrides.pop("gate", {"position": position})
    cfg = ModelConfig.preset("tiny", vocab_size=V, init_std=0.3, gate=gate, attention={"kind": kind}, **overrides)
    model = GatedTransformer(cfg).eval()
    g = torch.Generator().manual_seed(seed + 5)
    with torch.no_grad():
        for block in model.blocks:
            for p in [*block.attn.kernel.parameters(), *block.attn.gates.parameters()]:
                p.copy_(torch.randn(p.shape, generator=g))
    return model


def prompts(lengths=(3, 11, 7), seed: int = 3) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [[BOS, *torch.randint(0, BOS, (n,), generator=g).tolist()] for n in lengths]


@torch.no_grad()
def reference(model: GatedTransformer, prompt: list[int], n: int) -> tuple[list[int], list[torch.Tensor]]:
    """Greedy tokens and the last-position logits of each step, the whole sequence re-run every step."""
    seq, out, logits = list(prompt), [], []
    for _ in range(n):
        last = model(torch.tensor([seq]))[0, -1].float()
        logits.append(last)
        seq.append(int(last.argmax()))
        out.append(seq[-1])
    return out, logits


@torch.no_grad()
def assert_cached_logits_match(model: GatedTransformer, batch: list[list[int]], n: int = 6, atol: float = 2e-5) -> list[list[int]]:
    """Prefill the left-padded batch, then feed each row its reference tokens one step at a time:
    the cached logits equal the full forward's at every step. Returns the reference tokens."""
    refs = [reference(model, p, n) for p in batch]
    width = max(len(p) for p in batch)
    ids = torch.zeros(len(batch), width, dtype=torch.long)
    mask = torch.zeros(len(batch), width, dtype=torch.bool)
    for b, p in enumerate(batch):
        ids[b, width - len(p) :] = torch.tensor(p)
        mask[b, width - len(p) :] = True
    cache = model.new_cache(len(batch), width + n)
    logits = model.head(model.hidden(ids, cache=cache, mask_BT=mask)[:, -1]).float()
    for step in range(n):
        for b, (_, ref_logits) in enumerate(refs):
            torch.testing.assert_close(logits[b], ref_logits[step], atol=atol, rtol=1e-5, msg=f"row {b}, step {step}")
        fed = torch.tensor([[tokens[step]] for tokens, _ in refs])
        logits = model.head(model.hidden(fed, cache=cache)[:, -1]).float()
    return [tokens for tokens, _ in refs]


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("kind", KV_CACHE_KINDS)
def test_cached_equals_uncached_for_every_kind_and_gate(kind, position):
    model = build(kind, position)
    batch = prompts()
    tokens = assert_cached_logits_match(model, batch)
    assert len({t for row in tokens for t in row}) > 3, "the test needs a model whose choices vary"
    assert generate_greedy(model, batch, max_new_tokens=6) == tokens


OPTIONS = {
    "yarn": dict(rope={"scaling": "yarn", "factor": 4.0, "original_max_len": 8}),
    "learned positions": dict(position_encoding="learned"),
    "no positions": dict(position_encoding="nope"),
    "no qk-norm": dict(qk_norm=False),
    "untied head": dict(tie_embeddings=False),
    "moe": dict(moe={"n_experts": 4, "top_k": 2, "expert_dim": 32}),
    "moe grouped": dict(moe={"n_experts": 4, "top_k": 2, "expert_dim": 32, "impl": "grouped"}),
    "mqa": dict(n_kv_heads=1),
    "G1 headwise shared": dict(gate={"position": "G1", "granularity": "headwise", "sharing": "head_shared"}),
    "G2 headwise": dict(gate={"position": "G2", "granularity": "headwise"}),
    "G3 constant": dict(gate={"position": "G3", "input_dependent": False}),
    "G1 additive": dict(gate={"position": "G1", "mode": "additive", "activation": "silu"}),
    "G4 silu": dict(gate={"position": "G4", "activation": "silu"}),
    "G1 rmsnorm control": dict(gate={"position": "G1", "kind": "rmsnorm"}),
    "G1 silu control": dict(gate={"position": "G1", "kind": "silu"}),
}


# each option with one kind, the kinds taken in turn (every kind x gate position is above)
PAIRS = [(option, KV_CACHE_KINDS[i % len(KV_CACHE_KINDS)]) for i, option in enumerate(OPTIONS)]
PAIRS = [(o, "softpick" if o == "G1 rmsnorm control" and k in ("softmax1", "learned_sink", "key_bias") else k) for o, k in PAIRS]


@pytest.mark.parametrize("option, kind", PAIRS)
def test_cached_equals_uncached_with_every_model_option(option, kind):
    model = build(kind, **dict(OPTIONS[option]))
    batch = prompts()
    tokens = assert_cached_logits_match(model, batch)
    assert generate_greedy(model, batch, max_new_tokens=6) == tokens


def test_rope_override_beyond_the_training_length_is_cached_too():
    """RULER and the length evaluation swap RoPE (YaRN, a raised base); the cache uses the swapped one."""
    model = build("key_bias", "G1")
    batch = prompts((40, 25))
    for rope in (RopeConfig(scaling="yarn", factor=4.0, original_max_len=16), RopeConfig(base=1e6)):
        with rope_override(model, rope):
            tokens = assert_cached_logits_match(model, batch, n=4)
            assert generate_greedy(model, batch, max_new_tokens=4) == tokens


def test_bf16_cached_generation_runs_and_tracks_the_full_forward():
    model = build("softmax", "G1").to(torch.bfloat16)
    batch = prompts()
    assert_cached_logits_match(model, batch, n=3, atol=0.1)


def test_rows_stop_on_their_own_and_leave_the_batch():
    model = build("softmax1", "G2")
    batch = prompts((3, 11, 7, 5))
    free = generate_greedy(model, batch, max_new_tokens=8)
    singles = [generate_greedy(model, [p], max_new_tokens=8)[0] for p in batch]
    assert free == singles and all(len(o) == 8 for o in free)
    # a stop id ends a row without being returned; rows that never meet it run to the budget
    stop = free[0][2]
    stopped = generate_greedy(model, batch, max_new_tokens=8, stop_ids=[stop])
    for row, full in zip(stopped, free):
        assert row == (full[: full.index(stop)] if stop in full else full)
    # stop_when keeps the token that satisfied it; rows after a stopped row are unaffected
    stopped = generate_greedy(model, batch, max_new_tokens=8, stop_when=lambda out: len(out) >= 2 and out[-1] == free[1][1])
    assert stopped[1] == free[1][:2] and stopped[0] == free[0][: next((i + 1 for i in range(1, 8) if free[0][i] == free[1][1]), 8)]
    # a stop that never appears: every row generates its whole budget
    assert generate_greedy(model, batch, max_new_tokens=8, stop_ids=[V + 5], stop_when=lambda out: False) == free


def test_cache_bookkeeping_and_misuse():
    model = build()
    assert generate_greedy(model, [], max_new_tokens=4) == []
    assert generate_greedy(model, prompts(), max_new_tokens=0) == [[], [], []]
    with pytest.raises(ValueError, match="empty prompt"):
        generate_greedy(model, [[BOS, 1], []], max_new_tokens=2)
    cache = model.new_cache(2, 5)
    model.hidden(torch.ones(2, 4, dtype=torch.long), cache=cache)
    with pytest.raises(ValueError, match="KV cache full: it holds 5 tokens, this step needs 6"):
        model.hidden(torch.ones(2, 2, dtype=torch.long), cache=cache)
    with pytest.raises(ValueError, match="the cache holds 2 rows; this step has 3"):
        model.hidden(torch.ones(3, 1, dtype=torch.long), cache=model.new_cache(2, 5))
    from gatedmodels import ProbeResult

    with pytest.raises(ValueError, match="a probe pass runs without a KV cache"):
        model.hidden(torch.ones(1, 2, dtype=torch.long), cache=model.new_cache(1, 4), probe=ProbeResult())


def test_learned_positions_are_per_row_and_bounded():
    """A left-padded short row's positions start at 0: no false 'exceeds max_seq_len' from its padding."""
    model = build(position_encoding="learned", max_seq_len=16)
    out = generate_greedy(model, [[BOS, *range(1, 12)], [BOS, 1]], max_new_tokens=4)
    assert [len(o) for o in out] == [4, 4]
    with pytest.raises(ValueError, match="exceeds max_seq_len 16"):
        generate_greedy(model, [[BOS, *range(1, 14)]], max_new_tokens=4)


class NoCacheKind(Softmax):
    """A kind with a training path and no `attend` (as a new kind would be before its cache path)."""

    attend = AttentionKind.attend


def test_a_kind_without_a_cache_path_is_refused_by_name(monkeypatch):
    model = build()
    for block in model.blocks:
        block.attn.kernel = NoCacheKind(model.cfg)
        block.attn.kernel.name = "mla"
    assert not NoCacheKind.has_cache_path() and Softmax.has_cache_path()
    with pytest.raises(NoCachePath, match="attention kind 'mla' has no KV-cache path"):
        generate_greedy(model, prompts(), max_new_tokens=2)


def test_the_declared_cache_kinds_are_the_kinds_with_a_cache_path():
    """`KV_CACHE_KINDS` (torch-free, read at validation) says what the modules implement."""
    assert set(KV_CACHE_KINDS) == {name for name, cls in REGISTRY.items() if isinstance(cls, type) and cls.has_cache_path()}
    assert set(KV_CACHE_KINDS) <= set(ATTENTION_KINDS)
    assert set(ATTENTION_KINDS) - set(KV_CACHE_KINDS) == {"mla"}  # its latent cache is a follow-up


def test_a_kind_without_a_cache_path_refuses_a_cache_instead_of_recomputing():
    cfg = tiny_config(
        n_layers=1,
        n_heads=2,
        n_kv_heads=2,
        head_dim=16,
        qk_norm=False,
        attention={"kind": "mla", "mla_q_rank": 16, "mla_kv_rank": 16, "mla_rope_dim": 8},
    )
    model = GatedTransformer(cfg).eval()
    with pytest.raises(NotImplementedError, match="KV_CACHE_KINDS"):
        model.blocks[0].attn(torch.zeros(1, 3, cfg.d_model), None, object(), object())
