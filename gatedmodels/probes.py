"""Probes of an evaluation pass and their reductions to the paper's metrics.

`GatedTransformer.probe(input_ids)` fills one `LayerProbe` per layer: attention probabilities
(recomputed explicitly; training uses fused SDPA and pays nothing), value vectors, gate values
and the layer output. The functions below reduce them to numbers (REFERENCE §3):

- attention weights are those of the layer's attention kind (`gatedmodels.attention_kinds`):
  softmax rows sum to 1; a sink slot's share is recorded apart (`sink_slot_mass`); softpick rows sum
  to at most 1 and sigmoid rows are not normalised;
- first-token attention (Qiu et al. Table 4 "F-Attn"): A[i, 0] averaged over query positions
  i >= 1 (query 0 can only attend to itself), over samples and heads, per layer, then over layers;
- Gu et al. 2024's Sink_k^eps (sail-sg/Attention-Sink `eval_sink_open_source.py`): per
  (sample, layer, head), alpha_k = mean over queries i >= k (i < T) of A[i, k]; the share of
  triples with alpha_k > eps;
- massive activations (Sun et al. 2024): per layer output, max |h| and its ratio to median |h|;
  the paper's M-Act is the per-layer maximum averaged over layers;
- gate scores: mean and the fractions below 1e-2, 1e-3 and 0.1 and above 1, per layer (the
  last two read unbounded gates, softplus and 2·sigmoid, alike with sigmoid ones);
- value drain (Guo et al. 2024): the norm of the value vector at BOS over the mean of the others.

Shape legend: B batch, H heads, T query positions, S key positions, D d_model, K kv heads, d head width.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class LayerProbe:
    """What one layer recorded during a probe pass (all tensors detached, float32)."""

    attn: torch.Tensor | None = None
    """Attention weights on the real keys (B, H, T, S), in the attention kind's own normalisation."""
    sink: torch.Tensor | None = None
    """The weight of the extra sink slot (B, H, T) of softmax1 / learned_sink / key_bias, else None."""
    values: torch.Tensor | None = None
    """Value vectors after any G2 gate (B, T, K, d)."""
    gate: torch.Tensor | None = None
    """Gate values after the activation, (B, T, h, w) or broadcast to it."""
    output: torch.Tensor | None = None
    """The layer's output hidden state (B, T, D)."""


@dataclass
class ProbeResult:
    layers: list[LayerProbe] = field(default_factory=list)

    @property
    def attn(self) -> list[torch.Tensor]:
        return [layer.attn for layer in self.layers if layer.attn is not None]

    @property
    def sinks(self) -> list[torch.Tensor]:
        return [layer.sink for layer in self.layers if layer.sink is not None]

    @property
    def outputs(self) -> list[torch.Tensor]:
        return [layer.output for layer in self.layers if layer.output is not None]

    @property
    def gates(self) -> list[torch.Tensor]:
        return [layer.gate for layer in self.layers if layer.gate is not None]

    @property
    def values(self) -> list[torch.Tensor]:
        return [layer.values for layer in self.layers if layer.values is not None]


def first_token_attention(attn: list[torch.Tensor]) -> tuple[float, list[float]]:
    """Attention on key 0 over queries i >= 1: (mean over layers, per-layer means over heads)."""
    per_layer = [float(a[:, :, 1:, 0].float().mean()) for a in attn]
    return sum(per_layer) / len(per_layer), per_layer


def first_token_share(attn: list[torch.Tensor]) -> tuple[float, list[float]]:
    """Key 0's share of each query's attention on the real keys, over queries i >= 1: (mean over
    layers, per layer). Equal to `first_token_attention` where rows sum to 1 (softmax); for kinds
    whose rows do not (sigmoid: unnormalised; softpick: at most 1; a sink slot takes a share) it is
    the comparable reading: how much of what the query attends to sits on the first token. A row
    with no mass at all (softpick with every score <= 0) counts as 0."""
    per_layer = []
    for a in attn:
        rows = a[:, :, 1:].float()
        total = rows.sum(-1)
        share = torch.where(total > 0, rows[..., 0] / total.clamp_min(torch.finfo(torch.float32).tiny), 0.0)
        per_layer.append(float(share.mean()))
    return sum(per_layer) / len(per_layer), per_layer


def sink_slot_mass(sinks: list[torch.Tensor]) -> tuple[float, list[float]] | None:
    """The share of attention a sink slot absorbs (softmax1's zero logit, a learned sink logit, a
    learned key), over queries i >= 1 as in `first_token_attention`: (mean over layers, per layer).
    None for attention kinds without a slot. It is sink mass not counted in first-token attention."""
    if not sinks:
        return None
    per_layer = [float(s[:, :, 1:].float().mean()) for s in sinks]
    return sum(per_layer) / len(per_layer), per_layer


def sink_ratio(attn: list[torch.Tensor], eps: float = 0.3, k: int = 0, max_len: int = 64) -> tuple[float, list[float]]:
    """Gu et al.'s Sink_k^eps as a fraction in [0, 1]: (over all triples, per layer).

    Only the first `max_len` positions are used (their T = 64): with causal attention the
    probabilities of queries < max_len do not depend on later tokens.
    """
    per_layer = []
    hits = total = 0
    for a in attn:
        T = min(a.shape[-2], max_len)
        alpha_BH = a[:, :, k:T, k].float().mean(dim=-1)
        above = int((alpha_BH > eps).sum())
        per_layer.append(above / alpha_BH.numel())
        hits += above
        total += alpha_BH.numel()
    return hits / total, per_layer


def uniform_first_token_attention(seq_len: int) -> float:
    """First-token attention of uniform causal attention over queries 1..T-1: mean of 1/(i+1)."""
    return sum(1.0 / (i + 1) for i in range(1, seq_len)) / (seq_len - 1)


@dataclass
class ActivationStats:
    max_per_layer: list[float]
    median_per_layer: list[float]

    @property
    def ratio_per_layer(self) -> list[float]:
        return [m / max(med, 1e-12) for m, med in zip(self.max_per_layer, self.median_per_layer)]

    @property
    def mean_max(self) -> float:
        """The paper's M-Act: per-layer maximum averaged over layers."""
        return sum(self.max_per_layer) / len(self.max_per_layer)

    @property
    def peak(self) -> float:
        return max(self.max_per_layer)

    @property
    def peak_ratio(self) -> float:
        return max(self.ratio_per_layer)


def massive_activations(outputs: list[torch.Tensor]) -> ActivationStats:
    """Top |h| and median |h| of each layer output (Sun et al. 2024)."""
    maxes, medians = [], []
    for h in outputs:
        mag = h.detach().float().abs().flatten()
        maxes.append(float(mag.max()))
        medians.append(float(mag.median()))
    return ActivationStats(maxes, medians)


@dataclass
class GateStats:
    mean_per_layer: list[float]
    frac_below_1e2_per_layer: list[float]
    frac_below_1e3_per_layer: list[float]
    frac_below_0_1_per_layer: list[float] = field(default_factory=list)
    """Share of scores below 0.1 ("closed"): comparable across bounded and unbounded activations."""
    frac_above_1_per_layer: list[float] = field(default_factory=list)
    """Share of scores above 1 (amplifying): 0 for sigmoid, NS-sigmoid; possible for softplus,
    SiLU and 2·sigmoid, whose mean alone does not say whether the gate closes or amplifies."""

    @property
    def frac_below_0_1(self) -> float:
        return sum(self.frac_below_0_1_per_layer) / len(self.frac_below_0_1_per_layer)

    @property
    def frac_above_1(self) -> float:
        return sum(self.frac_above_1_per_layer) / len(self.frac_above_1_per_layer)

    @property
    def mean(self) -> float:
        return sum(self.mean_per_layer) / len(self.mean_per_layer)

    @property
    def frac_below_1e2(self) -> float:
        return sum(self.frac_below_1e2_per_layer) / len(self.frac_below_1e2_per_layer)

    @property
    def frac_below_1e3(self) -> float:
        return sum(self.frac_below_1e3_per_layer) / len(self.frac_below_1e3_per_layer)


def gate_statistics(gates: list[torch.Tensor]) -> GateStats | None:
    """Mean gate value and the fractions below 1e-2, 1e-3 and 0.1 and above 1, per layer; None without gates."""
    if not gates:
        return None
    means, below2, below3, below1, above = [], [], [], [], []
    for g in gates:
        g = g.float()
        means.append(float(g.mean()))
        below2.append(float((g < 1e-2).float().mean()))
        below3.append(float((g < 1e-3).float().mean()))
        below1.append(float((g < 0.1).float().mean()))
        above.append(float((g > 1.0).float().mean()))
    return GateStats(means, below2, below3, below1, above)


GATE_RANGE = {"2sigmoid": 2.0, "softplus": 2.0, "silu": 2.0}
"""Upper end of the gate-score histogram per activation (default 1: sigmoid and NS-sigmoid
are bounded by it). Unbounded activations are drawn to 2; scores beyond fall into the last bin,
and `frac_above_1` says how many exceed 1."""


def gate_range(activation: str) -> float:
    """The upper end of the gate-score histogram for `activation` (see GATE_RANGE)."""
    return GATE_RANGE.get(activation, 1.0)


def gate_histogram(gates: list[torch.Tensor], bins: int = 50, lo: float = 0.0, hi: float = 1.0) -> list[list[int]]:
    """Per-layer histogram counts of gate values over [lo, hi] (values outside are clamped)."""
    return [torch.histc(g.float().clamp(lo, hi), bins=bins, min=lo, max=hi).long().tolist() for g in gates]


def value_norm_ratio_at_bos(values: list[torch.Tensor]) -> tuple[float, list[float]]:
    """||v at position 0|| / mean ||v at positions >= 1||, averaged over batch and heads, per layer."""
    per_layer = []
    for v in values:
        norms_BTK = v.float().norm(dim=-1)
        per_layer.append(float(norms_BTK[:, 0].mean() / norms_BTK[:, 1:].mean().clamp_min(1e-12)))
    return sum(per_layer) / len(per_layer), per_layer
