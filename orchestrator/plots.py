"""The plots, as PNG files (matplotlib, Agg backend: no display needed): a sweep's comparison
(`dashboards.report`), one trial's own (`orchestrator.trial`, logged as its artifacts) and a
probe's (`orchestrator.interop.probe`). A leaf: it imports nothing of gatesweep's but
`orchestrator.printable`, so every room that draws may import it.

Every text a figure carries (titles, labels, legends, tick labels, notes) is made printable in
one place before the figure is laid out (`_printable`): a value from a shared sweep file with a
terminal escape or a bidi override is drawn as its escape (`\x1b`), as the console, the plan and
report.md show it, and matplotlib has no glyph to warn about.

Each function draws plain data (lists of numbers and labels) into one file and returns its path.
Comparison of a sweep's configurations:
- `loss_curves`: training loss of each configuration's seeds overlaid, loss spikes marked;
- `first_token_layers`: first-token attention per layer per variant, uniform level dashed;
- `attention_pair`: one attention map of the baseline beside the same layer of a gated variant;
- `gate_histograms`: distribution of gate scores per gated variant (all layers pooled), one
  small panel each;
- `metric_vs_axis`: each metric against one axis, every finished run a dot, level means joined
  (one line per arm when given);
- `interaction_plot`: each arm's Δ against the baseline at every level of an axis.
One trial, drawn by the same code: `loss_curve` (with its 0.9-EMA), `first_token_per_layer`,
`attention_map` (any 2-D array: a list of lists, a NumPy array or a CPU tensor) and
`gate_histogram` (one line per layer).
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np

from orchestrator.printable import terminal

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.text import Text
from matplotlib.ticker import FixedFormatter, FuncFormatter

DPI = 100
COLORS = plt.rcParams["axes.prop_cycle"].by_key()["color"]


def color(i: int) -> str:
    return COLORS[i % len(COLORS)]


def _shown(text: str) -> str:
    """`text` with its control and format characters as escapes; its own line breaks kept."""
    return "\n".join(terminal(line) for line in text.split("\n"))


def _shown_by(func, x, pos=None) -> str:
    return _shown(str(func(x, pos)))


def _printable(fig) -> None:
    """Every text of `fig` made printable (the module's docstring), tick labels' formatters too
    (matplotlib draws those again from the formatter)."""
    for artist in fig.findobj(Text):
        text = artist.get_text()
        if not text.isprintable():
            artist.set_text(_shown(text))
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            fmt = axis.get_major_formatter()
            if isinstance(fmt, FixedFormatter):
                fmt.seq = [_shown(str(s)) for s in fmt.seq]
            elif isinstance(fmt, FuncFormatter):  # what set_xticklabels(labels) makes
                fmt.func = functools.partial(_shown_by, fmt.func)


def _save(fig, path: Path) -> Path:
    _printable(fig)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


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
    return _save(fig, path)


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
    return _save(fig, path)


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
    _printable(fig)
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
    return _save(fig, path)


@dataclass
class AxisPanel:
    """One metric against one axis."""

    metric: str
    points: list[tuple[int, float]]
    """(level index, value) of every finished run."""
    means: list[float | None]
    """Per level: the main effect (mean over configurations)."""
    series: list[tuple[str, list[float | None]]] = field(default_factory=list)
    """Optional: (arm, its mean per level), one line each instead of the main effect, so that
    each arm's course over the axis shows (G1 at each model size beside the baseline)."""
    point_series: list[int] = field(default_factory=list)
    """With `series`: the series index of each point (its colour)."""


def metric_vs_axis(axis: str, levels: Sequence[str], panels: Sequence[AxisPanel], path: Path, *, log_x: bool = False) -> Path:
    """Levels are categories (in order); numeric axes spanning decades use their log10 as x."""
    n = len(panels)
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig, axs = plt.subplots(rows, cols, figsize=(3.4 * cols, 2.9 * rows), squeeze=False)
    xs_of = list(range(len(levels)))
    if log_x:
        xs_of = [math.log10(float(v)) if float(v) > 0 else 0.0 for v in levels]
    for k, panel in enumerate(panels):
        ax = axs[k // cols][k % cols]
        gaps = [b - a for a, b in zip(sorted(xs_of), sorted(xs_of)[1:]) if b > a]
        jitter = 0.15 * (min(gaps) if gaps else 1.0)
        px = [xs_of[i] + jitter * (((j * 7) % 5) - 2) / 2 for j, (i, _) in enumerate(panel.points)]
        if panel.series:
            colours = [color(panel.point_series[j]) if j < len(panel.point_series) else color(0) for j in range(len(panel.points))]
            ax.scatter(px, [v for _, v in panel.points], s=12, alpha=0.45, c=colours)
            for g, (label, values) in enumerate(panel.series):
                line = [(xs_of[i], v) for i, v in enumerate(values) if v is not None]
                if line:
                    ax.plot([x for x, _ in line], [v for _, v in line], "-o", color=color(g), lw=1.3, ms=4, label=label)
            if k == 0:
                ax.legend(fontsize=6, loc="best")
        else:
            ax.scatter(px, [v for _, v in panel.points], s=14, alpha=0.6, color=color(0))
        mx = [(xs_of[i], m) for i, m in enumerate(panel.means) if m is not None] if not panel.series else []
        if mx:
            ax.plot([x for x, _ in mx], [m for _, m in mx], "-o", color=color(1), lw=1.3, ms=4, label="mean over other axes")
            spread = [
                statistics.stdev(vals) if len(vals) > 1 else 0.0
                for vals in ([v for i2, v in panel.points if i2 == i] for i, m in enumerate(panel.means) if m is not None)
            ]
            ax.errorbar([x for x, _ in mx], [m for _, m in mx], yerr=spread, fmt="none", ecolor=color(1), elinewidth=1, capsize=3)
        ax.set_title(panel.metric, fontsize=9)
        pad = 0.5 if not log_x else 0.3
        ax.set_xlim(min(xs_of) - pad, max(xs_of) + pad)
        ax.set_xticks(xs_of)
        ax.set_xticklabels(
            levels,
            rotation=30 if max(len(v) for v in levels) > 6 else 0,
            fontsize=7,
            ha="right" if max(len(v) for v in levels) > 6 else "center",
        )
        ax.tick_params(axis="y", labelsize=7)
        ax.grid(alpha=0.3)
    for k in range(n, rows * cols):
        axs[k // cols][k % cols].axis("off")
    fig.suptitle(f"metrics against {axis}" + (" (log scale)" if log_x else ""), fontsize=10)
    # fixed margins: tight_layout would cost a third of the time of this many panels
    fig.subplots_adjust(left=0.08, right=0.98, top=1 - 0.5 / (2.9 * rows), bottom=0.28 / rows + 0.04, hspace=0.75, wspace=0.3)
    _printable(fig)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


@dataclass
class DeltaSeries:
    """One arm's Δ against the baseline at each level of an axis, on one metric."""

    label: str
    diffs: list[float | None]
    intervals: list[tuple[float, float] | None]
    """Per level: the 95% bootstrap interval of the Δ (None without one)."""
    significant: list[bool]
    """Per level: significant after Holm (filled marker) or not (hollow)."""
    group: int = 0
    """Colour index: the arm's, as in the other plots."""


@dataclass
class InteractionPanel:
    metric: str
    series: list[DeltaSeries]


def interaction_plot(axis: str, levels: Sequence[str], panels: Sequence[InteractionPanel], path: Path) -> Path:
    """Each arm's Δ against the baseline at every level of `axis`, one panel per metric; 0 (no
    effect) dashed; filled markers: significant after Holm."""
    n = len(panels)
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig, axs = plt.subplots(rows, cols, figsize=(3.6 * cols, 3.0 * rows), squeeze=False)
    xs = list(range(len(levels)))
    for k, panel in enumerate(panels):
        ax = axs[k // cols][k % cols]
        ax.axhline(0.0, color="gray", ls="--", lw=1)
        width = 0.25 / max(1, len(panel.series))
        for g, ser in enumerate(panel.series):
            off = (g - (len(panel.series) - 1) / 2) * width
            pts = [(x + off, d, iv, sig) for x, d, iv, sig in zip(xs, ser.diffs, ser.intervals, ser.significant) if d is not None]
            if not pts:
                continue
            c = color(ser.group)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "-", color=c, lw=1.2, label=ser.label)
            for x, d, iv, sig in pts:
                if iv is not None:
                    ax.plot([x, x], [iv[0], iv[1]], color=c, lw=1, alpha=0.7)
                ax.plot([x], [d], "o", ms=5, color=c, markerfacecolor=c if sig else "white")
        ax.set_title(panel.metric, fontsize=9)
        ax.set_xticks(xs)
        long = max(len(v) for v in levels) > 6
        ax.set_xticklabels(levels, rotation=30 if long else 0, fontsize=7, ha="right" if long else "center")
        ax.set_xlim(-0.5, len(levels) - 0.5)
        ax.tick_params(axis="y", labelsize=7)
        ax.grid(alpha=0.3)
        if k == 0:
            ax.legend(fontsize=6, loc="best")
    for k in range(n, rows * cols):
        axs[k // cols][k % cols].axis("off")
    fig.suptitle(f"Δ against the baseline at each level of {axis}", fontsize=10)
    return _save(fig, path)


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


# ---- a scaling ladder ----------------------------------------------------------------------
def _log_axes(ax, y: bool = False) -> None:
    """Log x (and y) with plain numbers and no crowded minor labels."""
    from matplotlib.ticker import FormatStrFormatter, LogFormatterSciNotation, NullFormatter

    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(LogFormatterSciNotation())
    ax.xaxis.set_minor_formatter(NullFormatter())
    if y:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FormatStrFormatter("%.3g"))
        ax.yaxis.set_minor_formatter(FormatStrFormatter("%.3g"))


@dataclass
class LadderArm:
    """One arm of a ladder: its runs' (compute, loss) and its fitted law, if any."""

    label: str
    points: list[tuple[float, float]]
    law: tuple[float, float, float] | None = None
    """(E, A, alpha) of L(C) = E + A·C^-alpha."""


def ladder_fits(arms: Sequence[LadderArm], target: float | None, path: Path, ylabel: str, title: str = "loss against compute") -> Path:
    """Loss against training FLOPs, log-log: every run a dot, each arm's fitted law a line over
    its rungs (dashed beyond them, up to the target when it is within 100x), the target marked."""
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    cs = [c for a in arms for c, _ in a.points]
    lo, hi = (min(cs), max(cs)) if cs else (1.0, 10.0)
    show_target = target is not None and math.isfinite(target) and target <= hi * 100
    for i, arm in enumerate(arms):
        if arm.points:
            ax.scatter([c for c, _ in arm.points], [v for _, v in arm.points], s=16, color=color(i), alpha=0.8, label=arm.label)
        if arm.law is not None:
            E, A, alpha = arm.law
            xs = np.geomspace(lo / 1.3, hi * 1.3, 80)
            ax.plot(xs, E + A * xs ** (-alpha), color=color(i), lw=1.2)
            if show_target and target is not None and target > hi * 1.3:
                far = np.geomspace(hi * 1.3, target, 40)
                ax.plot(far, E + A * far ** (-alpha), color=color(i), lw=1.0, ls="--")
    if target is not None and math.isfinite(target):
        if show_target:
            ax.axvline(target, color="gray", ls=":", lw=1, label=f"target {target:.2g} FLOPs")
        else:
            ax.annotate(
                f"target {target:.2g} FLOPs →\n({target / hi:.2g}x beyond)",
                xy=(0.98, 0.95),
                xycoords="axes fraction",
                ha="right",
                va="top",
                fontsize=8,
                color="gray",
            )
    _log_axes(ax, y=True)
    ax.set_xlabel("training compute (FLOPs, the variant's own)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    return _save(fig, path)


def ladder_multipliers(
    series: Sequence[tuple[str, list[float], list[float], list[float], list[float]]],
    path: Path,
    title: str = "effective-compute multiplier",
) -> Path:
    """Each arm's multiplier against the baseline at its rungs' compute, with the 95% band:
    (label, compute, value, low, high) per arm; 1 (no gain) dashed; log scale (a band's infinite
    end is drawn to the top of the plot, marked with an arrow)."""
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    finite = [x for _, _, vs, los, his in series for x in (*vs, *los, *his) if math.isfinite(x) and x > 0]
    top = max(finite) * 3 if finite else 10.0
    bottom = min(finite) / 3 if finite else 0.1
    for i, (label, cs, vs, los, his) in enumerate(series):
        k = i + 1  # colour 0 is the baseline's in the other ladder plots
        ok = [j for j in range(len(cs)) if math.isfinite(vs[j]) and vs[j] > 0]
        ax.plot([cs[j] for j in ok], [vs[j] for j in ok], marker="o", color=color(k), label=label)
        lo = [max(los[j], bottom) if math.isfinite(los[j]) else bottom for j in ok]
        hi = [his[j] if math.isfinite(his[j]) else top for j in ok]
        ax.fill_between([cs[j] for j in ok], lo, hi, color=color(k), alpha=0.2)
        for j in ok:
            if not math.isfinite(his[j]):
                ax.annotate("", xy=(cs[j], top), xytext=(cs[j], top / 1.8), arrowprops={"arrowstyle": "->", "color": color(k)})
    ax.axhline(1.0, color="gray", ls="--", lw=1)
    _log_axes(ax, y=True)
    ax.set_ylim(bottom, top * 1.05)
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    ticks = [2.0**k for k in range(-12, 13) if bottom <= 2.0**k <= top * 1.05]
    if 3 <= len(ticks) <= 10:  # within a few doublings: label ×1/4, ×1/2, ×1, ×2, ... (log ticks would label only 1)
        ax.yaxis.set_major_locator(FixedLocator(ticks))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("training compute (FLOPs)")
    ax.set_ylabel("baseline compute / arm compute")
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    return _save(fig, path)


def ladder_trends(panels: Sequence[tuple[str, Sequence[tuple[str, list[float], list[float], list[float]]]]], path: Path) -> Path:
    """One panel per metric: each arm's mean (± std) against its rungs' compute:
    (metric, [(arm label, compute, mean, std), ...])."""
    n = len(panels)
    fig, axes = plt.subplots(1, n, figsize=(3.6 * n + 0.6, 3.6), squeeze=False)
    for ax, (metric, arms) in zip(axes[0], panels):
        for i, (label, cs, means, stds) in enumerate(arms):
            ax.errorbar(
                cs, means, yerr=[s if math.isfinite(s) else 0.0 for s in stds], marker="o", ms=4, capsize=2, color=color(i), label=label
            )
        _log_axes(ax)
        ax.set_title(metric, fontsize=9)
        ax.set_xlabel("training FLOPs")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    return _save(fig, path)
