"""What a sweep's comparison and one trial both draw, by the same code, each into one PNG file
whose path it returns (plain data in: lists of numbers and labels).

A sweep's configurations (`dashboards.report`):
- `loss_curves`: training loss of each configuration's seeds overlaid, loss spikes marked;
- `first_token_layers`: first-token attention per layer per variant, uniform level dashed;
- `attention_pair`: one attention map of the baseline beside the same layer of a gated variant;
- `gate_histograms`: distribution of gate scores per gated variant (all layers pooled), one
  small panel each.
One trial (`orchestrator.trial`, logged as its artifacts; `orchestrator.interop.probe`):
`loss_curve` (with its 0.9-EMA), `first_token_per_layer`, `attention_map` (any 2-D array: a list
of lists, a NumPy array or a CPU tensor) and `gate_histogram` (one line per layer).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.ticker import NullLocator

from .figure import DPI, color, make_printable, plt, save


@dataclass
class Curve:
    """One run's loss curve."""

    label: str
    """The configuration's label (shared by its seeds: one legend entry)."""
    group: int
    """Colour index: the configuration."""
    steps: list[int]
    values: list[float]
    spikes: list[tuple[int, float]] = field(default_factory=list)
    """(step, loss) of each counted loss spike."""


def loss_curves(curves: Sequence[Curve], path: Path, title: str = "training loss") -> Path:
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    seen: set[int] = set()
    spike_label = "loss spike"
    for c in curves:
        label = c.label if c.group not in seen else None
        seen.add(c.group)
        ax.plot(c.steps, c.values, lw=1.1, color=color(c.group), alpha=0.85, label=label)
        if c.spikes:
            ax.scatter([s for s, _ in c.spikes], [v for _, v in c.spikes], marker="x", s=36, color="red", zorder=3, label=spike_label)
            spike_label = None
    ax.set_xlabel("step")
    ax.set_ylabel("train/loss (nats)")
    ax.set_title(title)
    finite = [v for c in curves for v in c.values if math.isfinite(v)]
    if finite and min(finite) > 0 and max(finite) / min(finite) > 20:
        ax.set_yscale("log")
    ax.legend(fontsize=7, ncol=2 if len(seen) > 6 else 1)
    ax.grid(alpha=0.3)
    return save(fig, path)


def first_token_layers(
    variants: Sequence[tuple[str, list[float]]], uniform: float | None, path: Path, title: str = "first-token attention per layer"
) -> Path:
    n_layers = max((len(v) for _, v in variants), default=0)
    fig, ax = plt.subplots(figsize=(max(5.0, min(12.0, 1.0 + 0.35 * n_layers * max(1, len(variants)))), 3.8))
    width = 0.8 / max(1, len(variants))
    for i, (label, values) in enumerate(variants):
        xs = [layer + (i - (len(variants) - 1) / 2) * width for layer in range(len(values))]
        ax.bar(xs, values, width=width, color=color(i), label=label)
    if uniform is not None:
        ax.axhline(uniform, color="gray", ls="--", lw=1, label=f"uniform ({uniform:.3f})")
    ax.set_xticks(range(n_layers))
    ax.set_xlabel("layer")
    ax.set_ylabel("attention on the first token")
    ax.set_ylim(0, 1)
    ax.set_title(title)
    ax.legend(fontsize=7)
    return save(fig, path)


def attention_maps(panels: Sequence[tuple[str, Any]], path: Path, title: str = "") -> Path:
    """Attention maps side by side: (label, (T, S) matrix of probabilities) each."""
    fig, axes = plt.subplots(1, len(panels), figsize=(0.4 + 4.0 * len(panels), 3.9), squeeze=False)
    axes = list(axes[0])
    im = None
    for ax, (label, matrix) in zip(axes, panels):
        im = ax.imshow(np.asarray(matrix, dtype=float), cmap="viridis", vmin=0, vmax=1, aspect="auto", interpolation="nearest")
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("key position")
    axes[0].set_ylabel("query position")
    if im is not None:
        fig.colorbar(im, ax=axes, fraction=0.03 if len(axes) > 1 else 0.046)
    if title:
        fig.suptitle(title, fontsize=10, y=1.04)
    make_printable(fig)
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return path


def attention_pair(left: tuple[str, Any], right: tuple[str, Any], path: Path, title: str = "") -> Path:
    return attention_maps([left, right], path, title)


LOW_GATE = 0.1
"""Gate scores below this count as "closed" in the gate-score panels' note."""


def gate_histograms(
    variants: Sequence[tuple[str, list[list[int]]]],
    path: Path,
    title: str = "gate scores",
    groups: Sequence[int] | None = None,
    highs: Sequence[float] | None = None,
) -> Path:
    """`variants`: (label, per-layer counts over equal bins of [0, high]); layers are pooled. Small
    multiples, one panel per variant on shared axes (overlaid lines hid one variant's mass at 0
    behind another's), each with the share of scores below LOW_GATE; `groups`: each panel's
    colour index (default: its position); `highs`: each variant's upper end (default 1; 2 for the
    unbounded activations, whose last bin holds every score beyond)."""
    n = len(variants)
    his = [float(h) for h in highs] if highs is not None else [1.0] * n
    cols = min(n, 4)
    rows = math.ceil(n / cols) if n else 1
    fig, axs = plt.subplots(rows, cols, figsize=(2.9 * cols + 0.4, 2.3 * rows + 0.5), squeeze=False, sharex=True, sharey=True)
    for k, (label, per_layer) in enumerate(variants):
        ax = axs[k // cols][k % cols]
        bins = len(per_layer[0])
        pooled = [sum(layer[b] for layer in per_layer if b < len(layer)) for b in range(bins)]
        total = max(sum(pooled), 1)
        frac = [c / total for c in pooled]
        hi = his[k] if k < len(his) else 1.0
        ax.bar(
            [(b + 0.5) * hi / bins for b in range(bins)],
            [f if f > 0 else float("nan") for f in frac],
            width=hi / bins,
            color=color(groups[k] if groups is not None and k < len(groups) else k),
            alpha=0.85,
        )
        low = sum(f for b, f in enumerate(frac) if (b + 1) * hi / bins <= LOW_GATE + 1e-9)
        ax.set_title(label, fontsize=9)
        ax.text(0.97, 0.93, f"{low:.0%} < {LOW_GATE:g}", transform=ax.transAxes, ha="right", va="top", fontsize=8)
        ax.set_xlim(0, max(his, default=1.0))
        if any(f > 0 for f in frac):
            ax.set_yscale("log")
            ax.yaxis.set_minor_locator(NullLocator())  # unlabelled marks whose ticks were a third of the figure's time
        else:  # no finite score was counted (a model with NaN weights): an empty panel that says so
            ax.text(0.5, 0.5, "no finite scores", transform=ax.transAxes, ha="center", va="center", fontsize=8)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
    for k in range(n, rows * cols):
        axs[k // cols][k % cols].axis("off")
    for ax in axs[-1]:
        ax.set_xlabel("gate score", fontsize=8)
    for row in axs:
        row[0].set_ylabel("fraction of scores", fontsize=8)
    fig.suptitle(title, fontsize=10)
    return save(fig, path)


# ---- one trial ----------------------------------------------------------------------------------
SPIKE_RULES = ("sigma", "ema")
"""Spike events a trial's loss curve marks (not the gradient-norm rule's)."""


def loss_curve(steps: list[int], losses: list[float], spikes: list[dict], path: Path, title: str = "") -> Path:
    """One trial's training loss, its 0.9-EMA, and its loss spikes (`SpikeDetector.events`)."""
    ema, smooth = None, []
    for v in losses:
        ema = v if ema is None else 0.9 * ema + 0.1 * v
        smooth.append(ema)
    marks = [(int(e["step"]), float(e["loss"])) for e in spikes if e.get("rule") in SPIKE_RULES]
    curves = [Curve("train loss", 0, list(steps), list(losses), marks)]
    if losses:
        curves.append(Curve("0.9-EMA", 1, list(steps), smooth))
    return loss_curves(curves, path, title or "training loss")


def first_token_per_layer(values: list[float], uniform: float | None, path: Path, title: str = "") -> Path:
    """One trial's first-token attention per layer."""
    return first_token_layers([("mean over heads", list(values))], uniform, path, title or "first-token attention per layer")


def attention_map(attn_TS: Any, path: Path, title: str = "") -> Path:
    """One (T, S) attention map."""
    return attention_maps([(title or "attention map", attn_TS)], path)


def gate_histogram(hist: list[list[int]], path: Path, title: str = "", high: float = 1.0) -> Path:
    """One trial's gate scores, one panel per layer (`hist`: per-layer counts over equal bins of [0, high])."""
    panels = [(f"layer {i}", [counts]) for i, counts in enumerate(hist)]
    return gate_histograms(panels, path, title or "gate-score histogram", highs=[high] * len(panels))
