"""Probe reductions give known values on hand-built attention maps and activations."""

from __future__ import annotations

import pytest
import torch

from gatedmodels import (
    first_token_attention,
    gate_histogram,
    gate_statistics,
    massive_activations,
    sink_ratio,
    uniform_first_token_attention,
    value_norm_ratio_at_bos,
)


def causal_uniform(B, H, T):
    m = torch.ones(T, T).tril()
    return (m / m.sum(-1, keepdim=True)).expand(B, H, T, T).clone()


def sink_map(B, H, T, mass):
    """Every query i >= 1 puts `mass` on key 0 and spreads the rest uniformly over keys 1..i."""
    a = torch.zeros(B, H, T, T)
    a[:, :, 0, 0] = 1
    for i in range(1, T):
        a[:, :, i, 0] = mass
        a[:, :, i, 1 : i + 1] = (1 - mass) / i
    return a


def test_first_token_attention_uniform_and_sink():
    T = 16
    mean, per_layer = first_token_attention([causal_uniform(2, 3, T)])
    assert mean == pytest.approx(uniform_first_token_attention(T))
    assert uniform_first_token_attention(3) == pytest.approx((1 / 2 + 1 / 3) / 2)
    mean, per_layer = first_token_attention([sink_map(2, 3, T, 0.9), sink_map(2, 3, T, 0.1)])
    assert per_layer == pytest.approx([0.9, 0.1])
    assert mean == pytest.approx(0.5)


def test_first_token_attention_excludes_query_zero():
    a = sink_map(1, 1, 4, 0.0)  # query 0 has A[0,0] = 1 but must not count
    assert first_token_attention([a])[0] == 0.0


def test_sink_ratio_counts_triples_above_eps():
    T = 10
    layer0 = sink_map(2, 2, T, 0.9)
    layer0[:, 1] = causal_uniform(2, 1, T)[:, 0]  # head 1 is uniform: alpha_0 = mean_i 1/(i+1) ~ 0.29
    layer1 = sink_map(2, 2, T, 0.2)  # alpha_0 = (1 + 9*0.2)/10 = 0.28 < 0.3
    ratio, per_layer = sink_ratio([layer0, layer1], eps=0.3)
    assert per_layer == pytest.approx([0.5, 0.0])
    assert ratio == pytest.approx(0.25)
    # alpha includes query k itself (i >= k): for the 0.2 map alpha = 0.28, above eps 0.25
    assert sink_ratio([layer1], eps=0.25)[0] == 1.0


def test_sink_ratio_uses_first_T_tokens_only():
    a = sink_map(1, 1, 100, 0.0)
    a[:, :, 64:, 0] = 1.0  # late queries attend to BOS, outside T = 64
    assert sink_ratio([a], eps=0.3, max_len=64)[0] == 0.0
    assert sink_ratio([a], eps=0.3, max_len=100)[0] == 1.0


def test_massive_activations():
    h = torch.ones(2, 5, 8)
    h[1, 0, 3] = -250.0
    stats = massive_activations([h, torch.full((2, 5, 8), 2.0)])
    assert stats.max_per_layer == [250.0, 2.0]
    assert stats.median_per_layer == [1.0, 2.0]
    assert stats.ratio_per_layer == [250.0, 1.0]
    assert stats.mean_max == 126.0 and stats.peak == 250.0


def test_gate_statistics_and_histogram():
    g = torch.tensor([0.0005, 0.005, 0.5, 1.0]).view(1, 4, 1, 1)
    stats = gate_statistics([g, torch.full((1, 4, 1, 1), 0.25)])
    assert stats.mean_per_layer == pytest.approx([(0.0005 + 0.005 + 0.5 + 1.0) / 4, 0.25])
    assert stats.frac_below_1e2_per_layer == [0.5, 0.0]
    assert stats.frac_below_1e3_per_layer == [0.25, 0.0]
    assert stats.frac_below_1e2 == 0.25
    assert stats.frac_below_0_1_per_layer == [0.5, 0.0] and stats.frac_above_1_per_layer == [0.0, 0.0]
    unbounded = gate_statistics([torch.tensor([0.05, 0.7, 1.0, 1.5, 3.0]).view(1, 5, 1, 1)])
    assert unbounded.frac_below_0_1 == pytest.approx(0.2) and unbounded.frac_above_1 == pytest.approx(0.4)
    assert unbounded.mean == pytest.approx(6.25 / 5)
    assert gate_statistics([]) is None
    hist = gate_histogram([g], bins=4)
    assert hist == [[2, 0, 1, 1]]


def test_value_norm_ratio_at_bos():
    v = torch.ones(2, 6, 1, 4)
    v[:, 0] *= 0.1
    ratio, per_layer = value_norm_ratio_at_bos([v])
    assert ratio == pytest.approx(0.1)


def test_first_token_share_is_first_token_attention_for_softmax_and_normalises_the_rest():
    from gatedmodels import first_token_share

    T = 12
    maps = [sink_map(2, 3, T, 0.9), causal_uniform(2, 3, T)]
    assert first_token_share(maps)[1] == pytest.approx(first_token_attention(maps)[1])
    # unnormalised rows (sigmoid attention): 0.5 on every causal key is uniform attention, not a sink
    half = causal_uniform(1, 1, T).ne(0).float() * 0.5
    assert first_token_attention([half])[0] == pytest.approx(0.5)
    assert first_token_share([half])[0] == pytest.approx(uniform_first_token_attention(T))
    # a row that attends nowhere (softpick with every score <= 0) counts as no share, not NaN
    empty = torch.zeros(1, 1, T, T)
    assert first_token_share([empty]) == (0.0, [0.0])
