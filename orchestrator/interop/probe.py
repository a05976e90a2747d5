"""The paper's probes on any GatedTransformer (trained, imported, exported), per layer and head.

One `model.probe` pass over N held-out sequences (BOS first), reduced by
`orchestrator.evals.probe_metrics` (the trial's held-out evaluation's own function), so the metrics
are the trial's, with the same names: first-token attention and share, sink-slot mass, Gu et al.'s
sink ratio, massive activations, value norm at BOS, gate statistics (each with `/layer_<i>`) and
val_loss / val_ppl / val_bpb of the same sequences. Beyond a trial's: first-token attention and
sink ratio per (layer, head). A probe tensor holding NaN or inf gives NaN metrics and a line in
`ProbeReport.warnings`, never a reassuring number. `probe_bytes` is what one pass holds in memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from gatedmodels import gate_histogram, gate_range, massive_activations
from orchestrator import plots
from orchestrator.evals.heldout import Perplexity
from orchestrator.evals.probe_metrics import FIRST_TOKEN_ATTN_UNIFORM, GATE_SCORE_MEAN, loss_metrics, probe_metrics

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
    warnings: list[str] = field(default_factory=list)
    """Probe tensors that held NaN or inf: their metrics are NaN."""
    gate_high: float = 1.0
    """The gate histogram's upper end (2 for unbounded activations)."""

    def to_json(self) -> dict:
        return {
            "metrics": self.metrics,
            "warnings": self.warnings,
            "sequences": self.sequences,
            "seq_len": self.seq_len,
            "first_token_attn_per_layer_head": self.first_token_heads,
            "sink_ratio_per_layer_head": self.sink_heads,
            "max_activation_per_layer": self.max_per_layer,
            "median_activation_per_layer": self.median_per_layer,
            "gate_score_mean_per_layer": self.gate_mean_per_layer,
            "gate_histogram": None
            if self.gate_hist is None
            else {"bins": len(self.gate_hist[0]), "range": [0.0, self.gate_high], "counts": self.gate_hist},
            "attention_maps": [{"layer": layer, "head": head, "matrix": m} for layer, head, m in self.attn_maps],
        }


def probe_bytes(cfg, sequences: int, seq_len: int) -> int:
    """Memory one probe pass of `sequences` x `seq_len` tokens holds at its peak: every layer's
    attention probabilities in float32 (B, H, T, T), kept for the reductions, plus the layer being
    computed twice over (logits, masked copy) and the float32 logits (B, T, V)."""
    attn = 4 * sequences * cfg.n_heads * seq_len * seq_len
    return attn * (cfg.n_layers + 2) + 4 * sequences * seq_len * (cfg.vocab_size + 4 * cfg.d_model * (cfg.n_layers + 1))


def available_bytes(device) -> int:
    """Memory free for a probe on `device`: the GPU's free memory, or the machine's available RAM."""
    if torch.device(device).type == "cuda":
        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    import psutil

    return int(psutil.virtual_memory().available)


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
    attn = probe.attn
    probed = probe_metrics(probe, inputs.shape[1], sink_eps=sink_eps, sink_tokens=sink_tokens)
    metrics = {**loss_metrics(*Perplexity.of(nll, targets.numel(), n_bytes)), **probed.metrics}
    heads_first = [a[:, :, 1:, 0].float().mean(dim=(0, 2)).tolist() for a in attn]
    heads_sink = []
    for a in attn:
        T = min(a.shape[-2], sink_tokens)
        alpha_BH = a[:, :, :T, 0].float().mean(dim=-1)
        share = (alpha_BH > sink_eps).float().mean(dim=0)
        heads_sink.append(share.masked_fill(~torch.isfinite(alpha_BH).all(dim=0), float("nan")).tolist())
    acts = massive_activations(probe.outputs)
    gates = probe.gates
    gate_means = [metrics[f"{GATE_SCORE_MEAN}/layer_{i}"] for i in range(len(gates))] if gates else None
    high = gate_range(model.cfg.gate.activation)
    hist = gate_histogram(gates, hi=high) if gates else None
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
        gate_high=high,
        attn_maps=maps,
        sequences=int(seqs.shape[0]),
        seq_len=int(inputs.shape[1]),
        warnings=probed.warnings,
    )


def write_plots(report: ProbeReport, out: Path, label: str) -> list[Path]:
    """attention_map.png (the most sink-like head of up to 6 layers, first to last),
    first_token_attn.png (per layer), gate_hist.png (gated models)."""
    n = len(report.attn_maps)
    picks = sorted({round(i * (n - 1) / (MAX_MAP_PANELS - 1)) for i in range(MAX_MAP_PANELS)}) if n > MAX_MAP_PANELS else list(range(n))
    panels = [(f"layer {layer}, head {head}", m) for layer, head, m in (report.attn_maps[i] for i in picks)]
    files = [
        plots.attention_maps(panels, out / "attention_map.png", f"{label}: most sink-like head per layer (sequence 0)"),
        plots.first_token_per_layer(
            [sum(h) / len(h) for h in report.first_token_heads],
            report.metrics[FIRST_TOKEN_ATTN_UNIFORM],
            out / "first_token_attn.png",
            f"first-token attention ({label})",
        ),
    ]
    if report.gate_hist:
        files.append(plots.gate_histogram(report.gate_hist, out / "gate_hist.png", f"gate scores ({label})", report.gate_high))
    return files
