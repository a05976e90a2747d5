"""The report's plots: which configurations each plot shows and the data drawn, read from the
comparison and the runs' artifacts (the `train/loss` history, `spikes.json`, `probes.json`); the
drawing itself is `orchestrator.plots`. Each plot is drawn as (PNG path, caption) (`Drawn`; the
report shows it as a `Figure` part), in report order (`make_plots`, one function each in
`PLOTS`). The metric names come from the registry (`dashboards.metrics`), the baseline and its
gated sibling from the comparison, the paper's gate from the gate config."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gatedmodels.config import GateConfig
from orchestrator import plots
from orchestrator.tracking import names

from .. import figures, ladder, layer_heatmaps
from ..artifacts import ArtifactCache, metric_history
from ..comparison import Comparison, Row
from ..metrics import FIRST_TOKEN, TRAIN_LOSS, axis_text
from ..records import BASELINE_AXES, BASELINE_GATE, GATE_AXIS, finite, is_variant_setting

MAX_CURVE_ROWS = 8
"""Configurations drawn in the overlaid plots (loss curves, per-layer attention, histograms)."""
MAX_SEEDS_PER_CURVE = 3
MAX_AXIS_PANELS = 6
"""Metrics drawn against each axis: the first columns (all of them are in the tables)."""
PAPER_GATE = GateConfig(position="G1").label
"""The paper's best gate (G1, elementwise): the gated row drawn beside the baseline's attention map when present."""
LOSS_CURVES, FIRST_TOKEN_LAYERS, ATTENTION_MAPS, GATE_HISTOGRAMS = (
    "loss_curves.png",
    "first_token_attn_per_layer.png",
    "attention_maps.png",
    "gate_histograms.png",
)
PLOT_FILES = (LOSS_CURVES, FIRST_TOKEN_LAYERS, ATTENTION_MAPS, GATE_HISTOGRAMS, *ladder.PLOTS)
"""The report's plot files of fixed names (those named after an axis: AXIS_PLOT_PATTERNS)."""
AXIS_PLOT_PATTERNS = ("metric_vs_*.png", "interaction_*.png", layer_heatmaps.HEATMAP_FILE)
"""Plot files a report writes besides PLOT_FILES (one per axis)."""
Drawn = tuple[Path, str]
"""A drawn plot: (PNG path, caption)."""


@dataclass
class Plotting:
    """What every plot reads: the store's client (for histories), the comparison, the output
    folder, the artifact cache and the configurations the overlaid plots show."""

    cl: Any
    comp: Comparison
    out: Path
    cache: ArtifactCache
    rows: list[Row]
    note: str
    """Says which configurations are drawn when not all are ("" when all are)."""

    def label(self, row: Row) -> str:
        return row.label(self.comp.axes)


def primary_metric(comp: Comparison) -> str | None:
    """The first metric column with a better side (val_ppl in the default columns)."""
    return next((m.key for m in comp.metrics if m.better is not None), None)


def plotted_rows(comp: Comparison, limit: int = MAX_CURVE_ROWS) -> tuple[list[Row], str]:
    """Configurations drawn in the overlaid plots and a note saying which when not all are."""
    rows = [r for r in comp.rows if r.n]
    if len(rows) <= limit:
        return rows, ""
    key = primary_metric(comp)
    base = [r for r in rows if r.is_baseline][:1]
    if key is None:
        return (base + [r for r in rows if r not in base])[:limit], f" ({limit} of {len(rows)} configurations)"
    better = next(m.better for m in comp.metrics if m.key == key)
    scored = [r for r in rows if r not in base and r.stats[key].mean is not None]
    scored.sort(key=lambda r: r.stats[key].mean if better == "min" else -r.stats[key].mean)
    picked = base + scored[: limit - len(base)]
    picked.sort(key=comp.rows.index)
    what = "the first baseline and " if base else ""
    return picked, f" ({limit} of {len(rows)} configurations: {what}the best by {key})"


def _representative(row: Row):
    """The run that stands for a configuration in single-run plots: its lowest seed."""
    return next(iter(row.counted.values()))


def make_plots(cl, comp: Comparison, out: Path, cache: ArtifactCache) -> list[Drawn]:
    """Draw every plot the data allows (each of PLOTS in order); return (path, caption) in report order."""
    rows, note = plotted_rows(comp)
    ctx = Plotting(cl, comp, out, cache, rows, note)
    return [fig for plot in PLOTS for fig in plot(ctx)]


def loss_curves(ctx: Plotting) -> list[Drawn]:
    """Training loss with spikes: up to MAX_SEEDS_PER_CURVE seeds of each configuration in one colour."""
    curves: list = []
    for g, row in enumerate(ctx.rows):
        for run in list(row.counted.values())[:MAX_SEEDS_PER_CURVE]:
            steps, values = metric_history(ctx.cl, run.run_id, TRAIN_LOSS)
            if not steps:
                continue
            spikes = ctx.cache.get(run, names.SPIKES_ARTIFACT) or {}
            rule = (spikes.get("rules") or {}).get("rule")
            events = [e for e in spikes.get("events") or [] if isinstance(e, dict) and (rule is None or e.get("rule") == rule)]
            marks = [(int(e["step"]), float(e["loss"])) for e in events if finite(e.get("loss")) and "step" in e]
            curves.append(plots.Curve(ctx.label(row), g, steps, values, marks))
    if not curves:
        return []
    seeds = min(MAX_SEEDS_PER_CURVE, max(r.n for r in ctx.rows))
    path = plots.loss_curves(curves, ctx.out / LOSS_CURVES, f"training loss, sweep {ctx.comp.sweep.name}")
    caption = (
        f"Training loss ({TRAIN_LOSS}) of each configuration, up to {seeds} seeds in one colour; red x: loss "
        f"spikes counted by the trial's rule (spikes.json){ctx.note}."
    )
    return [(path, caption)]


def first_token_layers(ctx: Plotting) -> list[Drawn]:
    """First-token attention per layer, mean over seeds, against uniform attention."""
    variants = [(ctx.label(row), per_layer) for row in ctx.rows if (per_layer := _per_layer_means(row, FIRST_TOKEN))]
    if not variants:
        return []
    path = plots.first_token_layers(variants, ctx.comp.uniform_first_token, ctx.out / FIRST_TOKEN_LAYERS)
    caption = (
        "First-token attention per layer (mean over seeds; attention on key 0 over queries ≥ 1, mean over "
        f"heads), dashed: uniform attention{ctx.note}."
    )
    return [(path, caption)]


def attention_maps(ctx: Plotting) -> list[Drawn]:
    """One attention map, the baseline beside its gated sibling."""
    pair = _attention_pair(ctx.comp, ctx.cache)
    if pair is None:
        return []
    (bl, bmap), (gl, gmap), caption = pair
    return [(plots.attention_pair((bl, bmap), (gl, gmap), ctx.out / ATTENTION_MAPS, "attention map, baseline beside gated"), caption)]


def gate_histograms(ctx: Plotting) -> list[Drawn]:
    """Gate-score histograms of every gated configuration (its lowest seed's probes.json)."""
    comp = ctx.comp
    hists, groups, highs = [], [], []
    arms = arm_labels(comp)
    for row in ctx.rows:
        if row.axes.get(GATE_AXIS) == BASELINE_GATE:
            continue
        probes = ctx.cache.get(_representative(row), names.PROBES_ARTIFACT) or {}
        gh = probes.get("gate_histogram")
        counts = gh.get("counts") if isinstance(gh, dict) else None
        if counts and all(isinstance(c, list) and c for c in counts):
            hists.append((ctx.label(row), counts))
            highs.append(_histogram_high(gh))
            groups.append(arms.index(row.label(comp.arch_axes)) if arms else len(groups))
    if not hists:
        return []
    path = plots.gate_histograms(hists, ctx.out / GATE_HISTOGRAMS, "gate-score distribution", groups, highs)
    caption = (
        "Gate scores on held-out data, all layers pooled, one panel per configuration on shared axes (probes.json of "
        f"its lowest seed); log scale: sparse gates pile up near 0, and each panel gives its share below "
        f"{plots.LOW_GATE:g}{ctx.note}."
    )
    return [(path, caption)]


def layer_heat(ctx: Plotting) -> list[Drawn]:
    """The per-layer heat maps (`dashboards.layer_heatmaps`): small panels, more rows than the overlaid plots."""
    heat_rows, heat_note = plotted_rows(ctx.comp, layer_heatmaps.MAX_ROWS)
    return layer_heatmaps.section(ctx.cl, ctx.comp, ctx.out, heat_rows, heat_note)


def ladder_plots(ctx: Plotting) -> list[Drawn]:
    """A ladder sweep's fits, multipliers and trends (`dashboards.ladder.draw`)."""
    return ladder.draw(ctx.comp.ladder, ctx.out) if ctx.comp.ladder is not None else []


def axis_plots(ctx: Plotting) -> list[Drawn]:
    return _axis_plots(ctx.comp, ctx.out)


def interaction_plots(ctx: Plotting) -> list[Drawn]:
    return _interaction_plots(ctx.comp, ctx.out)


PLOTS: list[Callable[[Plotting], list[Drawn]]] = [
    loss_curves,
    first_token_layers,
    attention_maps,
    gate_histograms,
    layer_heat,
    ladder_plots,
    axis_plots,
    interaction_plots,
]
"""The report's plots in order: each draws what the data allows (none when nothing). Adding a plot:
a function (Plotting) -> [(path, caption)] here and its file name in PLOT_FILES."""


def _histogram_high(gh: dict) -> float:
    """The upper end of a probes.json gate histogram (1 in files written before unbounded gates)."""
    rng = gh.get("range")
    high = rng[1] if isinstance(rng, list) and len(rng) == 2 else 1.0
    return float(high) if isinstance(high, (int, float)) and math.isfinite(high) and 0 < high <= 100 else 1.0


def _safe(axis: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in axis)


def _axis_plots(comp: Comparison, out: Path) -> list[Drawn]:
    """Each metric against each axis, levels in the sweep's order; for an axis that is not an
    arm's (a model size, a learning rate), one line per arm, so that each arm's course shows."""
    made = []
    folded = {q for qs in comp.together.values() for q in qs}
    for axis in (a for a in comp.axes if a not in folded):
        levels = comp.levels[axis]
        if len(levels) < 2:
            continue
        per_arm = bool(comp.arch_axes) and axis not in comp.arch_axes
        arms = arm_labels(comp) if per_arm else []
        panels = []
        effects = {e.level: e for e in comp.effects.get(axis, [])}
        for m in [m for m in comp.metrics if not _constant(comp, m.key)][:MAX_AXIS_PANELS]:
            points, owners = [], []
            for r in comp.rows:
                for run in r.counted.values():
                    if finite(run.metrics.get(m.key)):
                        points.append((levels.index(r.axes[axis]), run.metrics[m.key]))
                        owners.append(arms.index(r.label(comp.arch_axes)) if per_arm else 0)
            if not points:
                continue
            if effects:
                means = [effects[lv].means.get(m.key) if lv in effects else None for lv in levels]
            else:
                means = [next((r.stats[m.key].mean for r in comp.rows if r.axes[axis] == lv), None) for lv in levels]
            series = [(arm, [_mean_of(comp, axis, lv, arm, m.key) for lv in levels]) for arm in arms]
            panels.append(figures.AxisPanel(m.key, points, means, series, owners if per_arm else []))
        if not panels:
            continue
        numeric = all(_is_number(v) for v in levels)
        log_x = numeric and all(float(v) > 0 for v in levels) and max(float(v) for v in levels) / min(float(v) for v in levels) >= 100
        lines = (
            "one line per arm joins its means (over seeds and any other axis)"
            if per_arm
            else "the line joins the level means " + ("averaged over the other axes (main effect)" if effects else "over seeds")
        )
        made.append(
            (
                figures.metric_vs_axis(
                    comp.axis_title(axis), [axis_text(v) for v in levels], panels, out / f"metric_vs_{_safe(axis)}.png", log_x=log_x
                ),
                f"{', '.join(p.metric for p in panels)} against {comp.axis_title(axis)}, levels in the sweep's order: dots are "
                f"finished runs, {lines}.",
            )
        )
    return made


def arm_labels(comp: Comparison) -> list[str]:
    """Every arm's label in row order (the baseline's first when it comes first): the colour
    index of an arm in every plot."""
    return list(dict.fromkeys(r.label(comp.arch_axes) for r in comp.rows)) if comp.arch_axes else []


def _constant(comp: Comparison, key: str) -> bool:
    """Whether every finished run logged the same value (0 spikes everywhere): nothing to plot."""
    values = {run.metrics[key] for r in comp.rows for run in r.counted.values() if finite(run.metrics.get(key))}
    return len(values) <= 1


def _mean_of(comp: Comparison, axis: str, level: str, arm: str, key: str) -> float | None:
    """The mean over the rows of one arm at one level of its seed means."""
    vals = [
        r.stats[key].mean for r in comp.rows if r.axes[axis] == level and r.label(comp.arch_axes) == arm and r.stats[key].mean is not None
    ]
    return math.fsum(vals) / len(vals) if vals else None


def _interaction_plots(comp: Comparison, out: Path) -> list[Drawn]:
    """One plot per interaction: each arm's Δ at every level of the axis, per metric."""
    made = []
    arms = arm_labels(comp)
    for inter in comp.interactions:
        panels = []
        for m in comp.metrics:
            table = inter.cells.get(m.key)
            if table is None or len(panels) >= MAX_AXIS_PANELS:
                continue
            series = [
                figures.DeltaSeries(
                    arm,
                    [c.diff for c in cells],
                    [
                        (c.delta.boot_lo, c.delta.boot_hi)
                        if c.delta is not None and c.delta.boot_lo is not None and c.delta.boot_hi is not None
                        else None
                        for c in cells
                    ],
                    [c.significant for c in cells],
                    arms.index(arm) if arm in arms else 0,
                )
                for arm, cells in table.items()
            ]
            panels.append(figures.InteractionPanel(m.key, series))
        if not panels:
            continue
        path = figures.interaction_plot(
            comp.axis_title(inter.axis), [axis_text(v) for v in inter.levels], panels, out / f"interaction_{_safe(inter.axis)}.png"
        )
        made.append(
            (
                path,
                f"Each arm's Δ against the baseline ({comp.baseline_text}) at each level of {comp.axis_title(inter.axis)} "
                f"({', '.join(p.metric for p in panels)}): filled markers are significant at 0.05 after Holm, bars the 95% "
                "bootstrap interval of the paired Δ; dashed: no effect.",
            )
        )
    return made


def _is_number(v: str) -> bool:
    try:
        return math.isfinite(float(v))
    except ValueError:
        return False


def _per_layer_means(row: Row, prefix: str) -> list[float]:
    """Mean over the row's finished seeds of `<prefix>/layer_i`, for i = 0, 1, ..."""
    out = []
    i = 0
    while True:
        vals = [r.metrics[f"{prefix}/layer_{i}"] for r in row.counted.values() if finite(r.metrics.get(f"{prefix}/layer_{i}"))]
        if not vals:
            return out
        out.append(sum(vals) / len(vals))
        i += 1


def _attention_pair(comp: Comparison, cache: ArtifactCache):
    """((label, map), (label, map), caption) of the last layer's most sink-like head for the
    first baseline row and its gated sibling (PAPER_GATE when present, else the gated row
    with the least first-token attention), from their lowest seeds' probes.json."""
    others = [p for p in comp.axes if p not in BASELINE_AXES and not is_variant_setting(p)]
    arch = [p for p in comp.axes if p in BASELINE_AXES or is_variant_setting(p)]
    for base in (r for r in comp.rows if r.is_baseline and r.n):
        sibs = [r for r in comp.rows if r.baseline is base and r.n]
        if not sibs:
            continue
        g1 = [r for r in sibs if r.axes.get(GATE_AXIS) == PAPER_GATE]
        fta = lambda r: r.stats[FIRST_TOKEN].mean if FIRST_TOKEN in r.stats and r.stats[FIRST_TOKEN].mean is not None else math.inf
        gated = g1[0] if g1 else min(sibs, key=fta)
        maps = []
        for row in (base, gated):
            run = _representative(row)
            probes = cache.get(run, names.PROBES_ARTIFACT) or {}
            am = [m for m in probes.get("attention_maps") or [] if isinstance(m, dict) and m.get("matrix")]
            if not am:
                break
            m = am[-1]
            seed = ", ".join(f"{k.rsplit('.', 1)[-1]} {v}" for k, v in zip(comp.seed_axes, next(iter(row.counted)))) or run.name
            maps.append((f"{row.label(comp.axes)}\n(layer {m.get('layer')}, head {m.get('head')}, {seed})", m["matrix"]))
        if len(maps) == 2:
            rest = ", ".join(f"{p.rsplit('.', 1)[-1]}={axis_text(base.axes[p])}" for p in others)
            caption = (
                "Attention probabilities of the last layer's most sink-like head on one held-out sequence: the "
                f"baseline ({comp.baseline_text}) beside {gated.label(arch)}"
                + (f" at {rest}" if rest else "")
                + ". A bright first column is an attention sink."
            )
            return maps[0], maps[1], caption
    return None
