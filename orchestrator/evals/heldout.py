"""Held-out evaluation of a model: loss, perplexity, bits per byte, and the paper's probes.

Metric names are stable (they are MLflow keys and report columns):
  val_loss, val_ppl, val_bpb; first_token_attn (+ /layer_i) and first_token_attn_uniform;
  first_token_share (+ /layer_i): key 0's share of the real-key attention, the reading that
  compares across attention kinds whose rows do not sum to 1 (sigmoid, softpick, sink slots);
  sink_slot_mass (+ /layer_i): the share a sink slot absorbs (attention kinds softmax1,
  learned_sink, key_bias), sink mass that first_token_attn does not count;
  sink_ratio (+ /layer_i); max_activation (the paper's M-Act: per-layer max |h| averaged over
  layers), max_activation/peak, max_activation/ratio (max over median), max_activation/layer_i;
  gate_score_mean, gate_frac_below_1e-2, gate_frac_below_1e-3 (+ /layer_i); value_norm_bos_ratio;
  task metrics such as bbc/trigger_loss and bbc/copy_acc.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
import torch.nn.functional as F

from gatedmodels import (
    first_token_attention,
    first_token_share,
    gate_histogram,
    gate_statistics,
    massive_activations,
    sink_ratio,
    sink_slot_mass,
    uniform_first_token_attention,
    value_norm_ratio_at_bos,
)


@dataclass
class EvalResult:
    metrics: dict[str, float]
    attn_maps: list = field(default_factory=list)
    """One (T, S) attention map per layer: the head with the most first-token attention, sequence 0."""
    attn_heads: list[int] = field(default_factory=list)
    """The head shown in each map."""
    gate_hist: list[list[int]] | None = None
    """Per-layer histogram counts of gate values, 50 bins over [0, 1]."""
    first_token_per_layer: list[float] = field(default_factory=list)


def _per_layer(name: str, values: list[float]) -> dict[str, float]:
    return {f"{name}/layer_{i}": v for i, v in enumerate(values)}


class Perplexity(NamedTuple):
    loss: float
    """Mean next-token cross-entropy in nats."""
    ppl: float
    bpb: float
    """Bits per UTF-8 byte of the predicted tokens."""


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
    loss = nll / n_tokens
    return Perplexity(loss, math.exp(min(loss, 700.0)), nll / math.log(2) / max(n_bytes, 1))


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

        val = perplexity(model, val_batches, data.token_bytes, device=device, each=task_metrics)
        metrics = {"val_loss": val.loss, "val_ppl": val.ppl, "val_bpb": val.bpb}
        metrics.update({k: sum(v) / len(v) for k, v in task.items()})

        probe_seq = torch.cat(val_batches)[: cfg.probe_sequences, :-1].to(device)
        _, probe = model.probe(probe_seq)
        fta, fta_layers = first_token_attention(probe.attn)
        share, share_layers = first_token_share(probe.attn)
        sink, sink_layers = sink_ratio(probe.attn, eps=cfg.sink_eps, max_len=cfg.sink_tokens)
        acts = massive_activations(probe.outputs)
        vratio, vratio_layers = value_norm_ratio_at_bos(probe.values)
        metrics.update(
            {
                "first_token_attn": fta,
                "first_token_attn_uniform": uniform_first_token_attention(probe_seq.shape[1]),
                "first_token_share": share,
                "sink_ratio": sink,
                "max_activation": acts.mean_max,
                "max_activation/peak": acts.peak,
                "max_activation/ratio": acts.peak_ratio,
                "value_norm_bos_ratio": vratio,
            }
        )
        metrics.update(_per_layer("first_token_attn", fta_layers))
        metrics.update(_per_layer("first_token_share", share_layers))
        metrics.update(_per_layer("sink_ratio", sink_layers))
        metrics.update(_per_layer("max_activation", acts.max_per_layer))
        metrics.update(_per_layer("value_norm_bos_ratio", vratio_layers))
        slot = sink_slot_mass(probe.sinks)
        if slot is not None:  # softmax1 / learned_sink / key_bias: sink mass outside first-token attention
            metrics["sink_slot_mass"] = slot[0]
            metrics.update(_per_layer("sink_slot_mass", slot[1]))
        gates = gate_statistics(probe.gates)
        hist = None
        if gates is not None:
            metrics.update(
                {
                    "gate_score_mean": gates.mean,
                    "gate_frac_below_1e-2": gates.frac_below_1e2,
                    "gate_frac_below_1e-3": gates.frac_below_1e3,
                }
            )
            metrics.update(_per_layer("gate_score_mean", gates.mean_per_layer))
            hist = gate_histogram(probe.gates)
        maps, heads = [], []
        for a in probe.attn:
            head = int(a[0, :, 1:, 0].mean(-1).argmax())
            maps.append(a[0, head].cpu())
            heads.append(head)
        return EvalResult(metrics, maps, heads, hist, fta_layers)
    finally:
        model.train(was_training)


def probes_artifact(result: EvalResult, max_positions: int = 64) -> dict:
    """The probe data behind the plots, as JSON (dashboards redraw and compare from it)."""
    return {
        "first_token_attn_per_layer": result.first_token_per_layer,
        "first_token_attn_uniform": result.metrics.get("first_token_attn_uniform"),
        "attention_maps": [
            {"layer": i, "head": h, "matrix": [[round(float(x), 5) for x in row[:max_positions]] for row in m[:max_positions].tolist()]}
            for i, (m, h) in enumerate(zip(result.attn_maps, result.attn_heads))
        ],
        "gate_histogram": None
        if result.gate_hist is None
        else {"bins": len(result.gate_hist[0]), "range": [0.0, 1.0], "counts": result.gate_hist},
        "max_activation_per_layer": [
            result.metrics[k]
            for k in sorted((k for k in result.metrics if k.startswith("max_activation/layer_")), key=lambda k: int(k.rsplit("_", 1)[1]))
        ],
    }
