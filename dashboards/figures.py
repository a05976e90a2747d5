"""The report's own figures, each into one PNG file whose path it returns, in the figure style of
`orchestrator.plots.figure`:
- `metric_vs_axis`: each metric against one axis, every finished run a dot, level means joined
  (one line per arm when given);
- `interaction_plot`: each arm's Δ against the baseline at every level of an axis;
- the scaling ladder's (`dashboards.ladder`): `ladder_fits` (loss against compute, each arm's
  fitted law), `ladder_multipliers` (effective-compute multipliers with their bands) and
  `ladder_trends` (a metric's course over the rungs).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

from orchestrator.plots.figure import DPI, color, log_axes, make_printable, plt, save


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
    make_printable(fig)
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
    return save(fig, path)


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
    log_axes(ax, y=True)
    ax.set_xlabel("training compute (FLOPs, the variant's own)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    return save(fig, path)


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
    log_axes(ax, y=True)
    ax.set_ylim(bottom, top * 1.05)
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
    return save(fig, path)


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
        log_axes(ax)
        ax.set_title(metric, fontsize=9)
        ax.set_xlabel("training FLOPs")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    return save(fig, path)
