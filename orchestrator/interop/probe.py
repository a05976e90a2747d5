"""The paper's probes on any GatedTransformer (trained, imported, exported), per layer and head.

One `model.probe` pass over N held-out sequences (BOS first), as a trial's evaluation makes
(`orchestrator.evals.heldout.evaluate`), reduced with the same functions of `gatedmodels.probes`,
so the numbers are the trial metrics' (same names): `first_token_attn` (attention on key 0 over
queries i >= 1), `sink_ratio` (Gu et al.'s Sink_0^eps over the first `sink_tokens` tokens),
`max_activation` (the paper's M-Act) with `/peak` and `/ratio`, `gate_score_mean` and the
fractions below 1e-2 / 1e-3, `value_norm_bos_ratio`, and `val_loss` / `val_ppl` / `val_bpb`
of the same sequences. Beyond a trial's: first-token attention and sink ratio per (layer, head).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from gatedmodels import (
    first_token_attention,
    gate_histogram,
    gate_statistics,
    massive_activations,
    sink_ratio,
    uniform_first_token_attention,
    value_norm_ratio_at_bos,
)

MAP_POSITIONS = 64
"""Positions drawn in the attention maps (and stored in probe.json)."""
MAX_MAP_PANELS = 6


@dataclass
class ProbeReport:
    metrics: dict[str, float]
    first_token_heads: list[list[float]]
    """[layer][head]: attention on key 0, mean over queries i >= 1 and sequences."""
    sink_heads: list[list[float]]
    """[layer][head]: share of sequences whose alpha_0 > eps (Gu et al.)."""
    max_per_layer: list[float]
    median_per_layer: list[float]
    gate_mean_per_layer: list[float] | None
    gate_hist: list[list[int]] | None
    attn_maps: list[tuple[int, int, list[list[float]]]]
    """(layer, head, first MAP_POSITIONS x MAP_POSITIONS of sequence 0) for the most sink-like head of each layer."""
    sequences: int
    seq_len: int

    def to_json(self) -> dict:
        return {
            "metrics": self.metrics,
            "sequences": self.sequences,
            "seq_len": self.seq_len,
            "first_token_attn_per_layer_head": self.first_token_heads,
            "sink_ratio_per_layer_head": self.sink_heads,
            "max_activation_per_layer": self.max_per_layer,
            "median_activation_per_layer": self.median_per_layer,
            "gate_score_mean_per_layer": self.gate_mean_per_layer,
            "gate_histogram": None
            if self.gate_hist is None
            else {"bins": len(self.gate_hist[0]), "range": [0.0, 1.0], "counts": self.gate_hist},
            "attention_maps": [{"layer": layer, "head": head, "matrix": m} for layer, head, m in self.attn_maps],
        }


@torch.no_grad()
def run_probe(model, seqs: torch.Tensor, token_bytes, *, sink_eps: float = 0.3, sink_tokens: int = 64) -> ProbeReport:
    """`seqs`: (N, T + 1) token ids, BOS first; the model sees the first T, predicts the last T."""
    model.eval()
    device = next(model.parameters()).device
    seqs = seqs.to(device)
    inputs, targets = seqs[:, :-1], seqs[:, 1:]
    logits, probe = model.probe(inputs)
    logits = logits.float()
    nll = float(F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum"))
    n_bytes = int(torch.as_tensor(token_bytes)[targets.cpu()].sum())
    loss = nll / targets.numel()
    attn = probe.attn
    fta, fta_layers = first_token_attention(attn)
    sink, sink_layers = sink_ratio(attn, eps=sink_eps, max_len=sink_tokens)
    acts = massive_activations(probe.outputs)
    vratio, _ = value_norm_ratio_at_bos(probe.values)
    metrics = {
        "val_loss": loss,
        "val_ppl": math.exp(min(loss, 700.0)),
        "val_bpb": nll / math.log(2) / max(n_bytes, 1),
        "first_token_attn": fta,
        "first_token_attn_uniform": uniform_first_token_attention(inputs.shape[1]),
        "sink_ratio": sink,
        "max_activation": acts.mean_max,
        "max_activation/peak": acts.peak,
        "max_activation/ratio": acts.peak_ratio,
        "value_norm_bos_ratio": vratio,
    }
    metrics.update({f"first_token_attn/layer_{i}": v for i, v in enumerate(fta_layers)})
    metrics.update({f"sink_ratio/layer_{i}": v for i, v in enumerate(sink_layers)})
    heads_first = [a[:, :, 1:, 0].float().mean(dim=(0, 2)).tolist() for a in attn]
    heads_sink = []
    for a in attn:
        T = min(a.shape[-2], sink_tokens)
        alpha_BH = a[:, :, :T, 0].float().mean(dim=-1)
        heads_sink.append((alpha_BH > sink_eps).float().mean(dim=0).tolist())
    gates = gate_statistics(probe.gates)
    hist = None
    gate_means = None
    if gates is not None:
        metrics.update(
            {"gate_score_mean": gates.mean, "gate_frac_below_1e-2": gates.frac_below_1e2, "gate_frac_below_1e-3": gates.frac_below_1e3}
        )
        metrics.update({f"gate_score_mean/layer_{i}": v for i, v in enumerate(gates.mean_per_layer)})
        gate_means = gates.mean_per_layer
        hist = gate_histogram(probe.gates)
    maps = []
    for i, a in enumerate(attn):
        head = int(a[0, :, 1:, 0].mean(-1).argmax())
        m = a[0, head, :MAP_POSITIONS, :MAP_POSITIONS].cpu()
        maps.append((i, head, [[round(float(x), 5) for x in row] for row in m.tolist()]))
    return ProbeReport(
        metrics=metrics,
        first_token_heads=heads_first,
        sink_heads=heads_sink,
        max_per_layer=acts.max_per_layer,
        median_per_layer=acts.median_per_layer,
        gate_mean_per_layer=gate_means,
        gate_hist=hist,
        attn_maps=maps,
        sequences=int(seqs.shape[0]),
        seq_len=int(inputs.shape[1]),
    )


def write_plots(report: ProbeReport, out: Path, label: str) -> list[Path]:
    """attention_map.png (the most sink-like head of up to 6 layers, first to last),
    first_token_attn.png (per layer), gate_hist.png (gated models)."""
    from orchestrator import plots

    n = len(report.attn_maps)
    picks = sorted({round(i * (n - 1) / (MAX_MAP_PANELS - 1)) for i in range(MAX_MAP_PANELS)}) if n > MAX_MAP_PANELS else list(range(n))
    panels = [(f"layer {layer}, head {head}", m) for layer, head, m in (report.attn_maps[i] for i in picks)]
    files = [
        plots.attention_maps(panels, out / "attention_map.png", f"{label}: most sink-like head per layer (sequence 0)"),
        plots.first_token_per_layer(
            [sum(h) / len(h) for h in report.first_token_heads],
            report.metrics["first_token_attn_uniform"],
            out / "first_token_attn.png",
            f"first-token attention ({label})",
        ),
    ]
    if report.gate_hist:
        files.append(plots.gate_histogram(report.gate_hist, out / "gate_hist.png", f"gate scores ({label})"))
    return files
