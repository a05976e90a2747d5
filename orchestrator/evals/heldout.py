"""Held-out evaluation of a model: loss, perplexity, bits per byte, and the paper's probes.

The metrics and their names come from `probe_metrics` (the one place that names them, shared with
`gatesweep probe`): val_loss, val_ppl, val_bpb, the probe pass's first-token attention and share,
sink-slot mass, sink ratio, massive activations, value norm at BOS and gate statistics (each with
`/layer_<i>`), and the task's own metrics such as bbc/trigger_loss and bbc/copy_acc. A probe
tensor holding NaN or inf makes its metrics NaN, with a line in `EvalResult.warnings`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
import torch.nn.functional as F

from gatedmodels import gate_histogram, gate_range

from .probe_metrics import FIRST_TOKEN_ATTN, FIRST_TOKEN_ATTN_UNIFORM, MAX_ACTIVATION, loss_metrics, probe_metrics


@dataclass
class EvalResult:
    metrics: dict[str, float]
    attn_maps: list = field(default_factory=list)
    """One (T, S) attention map per layer: the head with the most first-token attention, sequence 0."""
    attn_heads: list[int] = field(default_factory=list)
    """The head shown in each map."""
    gate_hist: list[list[int]] | None = None
    """Per-layer histogram counts of gate values, 50 bins over [0, gate_high]."""
    first_token_per_layer: list[float] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    """Probe tensors that held NaN or inf (their metrics are NaN)."""
    gate_high: float = 1.0
    """The histogram's upper end: 1, or 2 for the unbounded activations (`gatedmodels.probes.GATE_RANGE`)."""


class Perplexity(NamedTuple):
    loss: float
    """Mean next-token cross-entropy in nats."""
    ppl: float
    bpb: float
    """Bits per UTF-8 byte of the predicted tokens."""

    @classmethod
    def of(cls, nll: float, n_tokens: int, n_bytes: int) -> Perplexity:
        """From the summed cross-entropy `nll` of `n_tokens` predicted tokens standing for `n_bytes` bytes."""
        loss = nll / n_tokens
        return cls(loss, math.exp(min(loss, 700.0)), nll / math.log(2) / max(n_bytes, 1))


@torch.no_grad()
def perplexity(
    model, batches: Iterable[torch.Tensor], token_bytes, *, device, each: Callable[[torch.Tensor, torch.Tensor], None] | None = None
) -> Perplexity:
    """Loss, perplexity and bits per byte of next-token prediction over (B, T+1) batches that
    start with BOS; `token_bytes[id]` is the number of bytes token `id` stands for. `each(logits,
    seq)` sees every batch (held-out task metrics). The periodic evaluation (`val_*`) and the
    perplexity sets (`ppl/<set>`, `bpb/<set>`, orchestrator.evals.suite) both come from here."""
    nll, n_tokens, n_bytes = 0.0, 0, 0
    tb = torch.as_tensor(token_bytes)
    for seq in batches:
        seq = seq.to(device)
        logits = model(seq[:, :-1]).float()
        targets = seq[:, 1:]
        nll += float(F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum"))
        n_tokens += targets.numel()
        n_bytes += int(tb[targets.cpu()].sum())
        if each is not None:
            each(logits, seq)
    return Perplexity.of(nll, n_tokens, n_bytes)


@torch.no_grad()
def evaluate(model, data, val_batches: list[torch.Tensor], cfg, *, device: torch.device | str = "cpu") -> EvalResult:
    """`model` is a GatedTransformer (unwrapped), `cfg` an EvalConfig."""
    was_training = model.training
    model.eval()
    try:
        task: dict[str, list[float]] = {}

        def task_metrics(logits: torch.Tensor, seq: torch.Tensor) -> None:
            for k, v in data.task_metrics(logits.cpu(), seq.cpu()).items():
                task.setdefault(k, []).append(v)

        metrics = loss_metrics(*perplexity(model, val_batches, data.token_bytes, device=device, each=task_metrics))
        metrics.update({k: sum(v) / len(v) for k, v in task.items()})

        probe_seq = torch.cat(val_batches)[: cfg.probe_sequences, :-1].to(device)
        _, probe = model.probe(probe_seq)
        probed = probe_metrics(probe, probe_seq.shape[1], sink_eps=cfg.sink_eps, sink_tokens=cfg.sink_tokens)
        metrics.update(probed.metrics)
        high = gate_range(model.cfg.gate.activation)
        hist = gate_histogram(probe.gates, hi=high) if probe.gates else None
        maps, heads = [], []
        for a in probe.attn:
            head = int(a[0, :, 1:, 0].mean(-1).argmax())
            maps.append(a[0, head].cpu())
            heads.append(head)
        fta_layers = [metrics[f"{FIRST_TOKEN_ATTN}/layer_{i}"] for i in range(len(probe.attn))]
        return EvalResult(metrics, maps, heads, hist, fta_layers, probed.warnings, gate_high=high)
    finally:
        model.train(was_training)


def probes_artifact(result: EvalResult, max_positions: int = 64) -> dict:
    """The probe data behind the plots, as JSON (dashboards redraw and compare from it)."""
    return {
        "first_token_attn_per_layer": result.first_token_per_layer,
        "first_token_attn_uniform": result.metrics.get(FIRST_TOKEN_ATTN_UNIFORM),
        "attention_maps": [
            {"layer": i, "head": h, "matrix": [[round(float(x), 5) for x in row[:max_positions]] for row in m[:max_positions].tolist()]}
            for i, (m, h) in enumerate(zip(result.attn_maps, result.attn_heads))
        ],
        "gate_histogram": None
        if result.gate_hist is None
        else {"bins": len(result.gate_hist[0]), "range": [0.0, result.gate_high], "counts": result.gate_hist},
        "max_activation_per_layer": [
            result.metrics[k]
            for k in sorted((k for k in result.metrics if k.startswith(f"{MAX_ACTIVATION}/layer_")), key=lambda k: int(k.rsplit("_", 1)[1]))
        ],
    }
