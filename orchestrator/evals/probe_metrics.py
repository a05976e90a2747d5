"""The metrics of one probe pass, and of held-out loss: the one place that names them.

A trial's held-out evaluation (`heldout.evaluate`), `gatesweep probe` (`orchestrator.interop.probe`)
and the synthetic store of `benchmarks/report_scale.py` all take their metric dictionaries from
here, so the three cannot drift: the same keys, from the same reductions of `gatedmodels.probes`.
Every key is a registry name (`orchestrator.core.metrics`); a name the registry does not know fails at
import, not in a report.

Non-finite inputs are never read as a reassuring number: a probe tensor holding NaN or inf (a
diverged or damaged model) makes every metric computed from it NaN, and says so in
`Probed.warnings` (Gu et al.'s sink ratio of NaN attention would otherwise count 0 sinks, and
NaN gate scores would count 0 below 1e-2).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from gatedmodels import (
    ProbeResult,
    first_token_attention,
    first_token_share,
    gate_statistics,
    massive_activations,
    sink_ratio,
    sink_slot_mass,
    uniform_first_token_attention,
    value_norm_ratio_at_bos,
)
from orchestrator.core import metrics as registry


def _registered(name: str) -> str:
    registry.get(name)  # KeyError at import for a name the registry does not know
    return name


VAL_LOSS = _registered("val_loss")
VAL_PPL = _registered("val_ppl")
VAL_BPB = _registered("val_bpb")
FIRST_TOKEN_ATTN = _registered("first_token_attn")
FIRST_TOKEN_ATTN_UNIFORM = _registered("first_token_attn_uniform")
FIRST_TOKEN_SHARE = _registered("first_token_share")
SINK_SLOT_MASS = _registered("sink_slot_mass")
SINK_RATIO = _registered("sink_ratio")
MAX_ACTIVATION = _registered("max_activation")
MAX_ACTIVATION_PEAK = _registered("max_activation/peak")
MAX_ACTIVATION_RATIO = _registered("max_activation/ratio")
VALUE_NORM_BOS_RATIO = _registered("value_norm_bos_ratio")
GATE_SCORE_MEAN = _registered("gate_score_mean")
GATE_FRAC_BELOW_1E2 = _registered("gate_frac_below_1e-2")
GATE_FRAC_BELOW_1E3 = _registered("gate_frac_below_1e-3")
GATE_FRAC_BELOW_0_1 = _registered("gate_frac_below_0.1")
GATE_FRAC_ABOVE_1 = _registered("gate_frac_above_1")

NAN = float("nan")


def per_layer(name: str, values: Sequence[float]) -> dict[str, float]:
    """`<name>/layer_<i>` for each layer (the registry gives them their metric's entry)."""
    return {f"{name}/layer_{i}": float(v) for i, v in enumerate(values)}


def loss_metrics(loss: float, ppl: float, bpb: float) -> dict[str, float]:
    """val_loss (mean next-token cross-entropy in nats), val_ppl and val_bpb (bits per UTF-8 byte):
    `heldout.Perplexity`'s fields under their registry names."""
    return {VAL_LOSS: loss, VAL_PPL: ppl, VAL_BPB: bpb}


@dataclass
class Probed:
    metrics: dict[str, float]
    warnings: list[str] = field(default_factory=list)
    """One line per kind of probe tensor that held NaN or inf (its metrics are NaN)."""


def _bad_layers(tensors: list[torch.Tensor]) -> list[int]:
    return [i for i, t in enumerate(tensors) if not bool(torch.isfinite(t).all())]


def _guarded(metrics: dict[str, float], names: Sequence[str], bad: list[int]) -> None:
    """NaN for every aggregate in `names` and for the per-layer values of the `bad` layers."""
    if not bad:
        return
    for name in names:
        if name in metrics:
            metrics[name] = NAN
        for i in bad:
            key = f"{name}/layer_{i}"
            if key in metrics:
                metrics[key] = NAN


def probe_metrics(probe: ProbeResult, seq_len: int, *, sink_eps: float, sink_tokens: int) -> Probed:
    """The probe metrics of one `model.probe` pass over sequences of `seq_len` tokens (BOS first):
    first_token_attn and its uniform baseline, first_token_share, sink_slot_mass (attention kinds
    with a sink slot), sink_ratio (Gu et al., `sink_eps`, the first `sink_tokens` positions),
    max_activation (the paper's M-Act) with /peak and /ratio, value_norm_bos_ratio, and for gated
    models gate_score_mean and the fractions below 1e-2, 1e-3 and 0.1 and above 1 (unbounded
    gates: softplus, SiLU, 2·sigmoid); each of the first group and gate_score_mean with /layer_<i>."""
    out: dict[str, float] = {}
    warnings: list[str] = []
    attn = probe.attn
    fta, fta_layers = first_token_attention(attn)
    share, share_layers = first_token_share(attn)
    sink, sink_layers = sink_ratio(attn, eps=sink_eps, max_len=sink_tokens)
    acts = massive_activations(probe.outputs)
    vratio, vratio_layers = value_norm_ratio_at_bos(probe.values)
    out.update(
        {
            FIRST_TOKEN_ATTN: fta,
            FIRST_TOKEN_ATTN_UNIFORM: uniform_first_token_attention(seq_len),
            FIRST_TOKEN_SHARE: share,
            SINK_RATIO: sink,
            MAX_ACTIVATION: acts.mean_max,
            MAX_ACTIVATION_PEAK: acts.peak,
            MAX_ACTIVATION_RATIO: acts.peak_ratio,
            VALUE_NORM_BOS_RATIO: vratio,
        }
    )
    out.update(per_layer(FIRST_TOKEN_ATTN, fta_layers))
    out.update(per_layer(FIRST_TOKEN_SHARE, share_layers))
    out.update(per_layer(SINK_RATIO, sink_layers))
    out.update(per_layer(MAX_ACTIVATION, acts.max_per_layer))
    out.update(per_layer(VALUE_NORM_BOS_RATIO, vratio_layers))
    slot = sink_slot_mass(probe.sinks)
    if slot is not None:  # softmax1 / learned_sink / key_bias: sink mass outside first-token attention
        out[SINK_SLOT_MASS] = slot[0]
        out.update(per_layer(SINK_SLOT_MASS, slot[1]))
    gates = gate_statistics(probe.gates)
    if gates is not None:
        out.update({GATE_SCORE_MEAN: gates.mean, GATE_FRAC_BELOW_1E2: gates.frac_below_1e2, GATE_FRAC_BELOW_1E3: gates.frac_below_1e3})
        out.update({GATE_FRAC_BELOW_0_1: gates.frac_below_0_1, GATE_FRAC_ABOVE_1: gates.frac_above_1})
        out.update(per_layer(GATE_SCORE_MEAN, gates.mean_per_layer))
    checks = (
        ("attention probabilities", attn, (FIRST_TOKEN_ATTN, FIRST_TOKEN_SHARE, SINK_RATIO)),
        ("sink-slot attention", probe.sinks, (SINK_SLOT_MASS,)),
        ("layer outputs", probe.outputs, (MAX_ACTIVATION, MAX_ACTIVATION_PEAK, MAX_ACTIVATION_RATIO)),
        ("value vectors", probe.values, (VALUE_NORM_BOS_RATIO,)),
        ("gate scores", probe.gates, (GATE_SCORE_MEAN, GATE_FRAC_BELOW_1E2, GATE_FRAC_BELOW_1E3, GATE_FRAC_BELOW_0_1, GATE_FRAC_ABOVE_1)),
    )
    for what, tensors, names in checks:
        bad = _bad_layers(tensors)
        if bad:
            _guarded(out, names, bad)
            where = "every layer" if len(bad) == len(tensors) else "layer" + ("s " if len(bad) > 1 else " ") + ", ".join(map(str, bad))
            warnings.append(f"the model's {what} are not finite (NaN or inf in {where}): {', '.join(names)} reported as NaN")
    return Probed(out, warnings)
