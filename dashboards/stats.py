"""Seed statistics of a sweep: rows, means, confidence intervals, deltas, paired tests, main effects.

- **Rows** are distinct configurations: runs grouped by the values of every varying axis except
  the seed axes (`train.seed`, or any axis whose last part is `seed`). One run counts per seed
  cell: when a cell has several runs (a re-launch, a `--rerun`), the newest finished one counts
  and the others are listed as superseded, never dropped silently.
- **Statistics** over the finished seeds of a row, per metric: mean, sample standard deviation
  (ddof 1), the 95% percentile bootstrap interval of the mean (inside the values' range, so
  never below 0 for a non-negative metric) and the Student's t interval, mean ± t(0.975,
  n-1)·std/√n (none for n < 2); see `seedstats`.
- **Delta** against the baseline row: the row with gate `none` and softmax attention
  (`records.BASELINE_AXES`) and every other non-seed axis equal (the paper's baseline,
  REFERENCE §2; attention-sink remedies are compared with it too). Δ = mean(row) - mean(baseline), relative Δ in %
  of the baseline, the bootstrap interval of the mean paired difference, and a paired t-test
  over the seeds both rows finished (two-sided, as scipy.stats.ttest_rel; needs at least 2 pairs
  and some variation in the differences). The p values of the whole Δ table (every row and
  metric that has one) are one family, adjusted by **Holm**'s method (`Delta.p_holm`); each test
  also has its power to detect the observed Δ and the **seeds needed** for 80% power, at α 0.05
  and at α/m, the level the correction holds the smallest of the m p values to.
- **Best** per column: the lowest (or highest) mean among rows, per the metric's direction
  (`dashboards.metrics`), marked only where the difference is significant after Holm: a row
  whose Δ against its baseline is, or a baseline row every row compared with it differs from
  significantly. Metrics with no better side (the gate score) mark nothing; neither does a sweep
  without a baseline row (no tests, so nothing is shown to be better).
- **Main effects** per axis: for each level, the metric averaged over the configurations at that
  level (each configuration's seed mean weighs the same), i.e. averaged over the other axes.
- **Interactions**: each arm's Δ at every level of each other axis (`dashboards.interactions`).
- **Levels** of every axis in the sweep's order (`dashboards.levels`): rows, main effects,
  interactions and plots follow it.
- **Metrics** asked for (`--metrics`) must be metrics some run of the sweep logged: another name
  is a `StoreError` (exit 2) with the closest logged names, before anything is written.

Metric values are the runs' final values (REFERENCE §3 defines them); only finished runs count.

Rooms: `seedstats` (the statistics of one row and the paired test), `comparison` (the rows and
the `Comparison` they make up), and this module (grouping runs into rows, baselines, best values,
main effects), which re-exports the names of the other two.
"""

from __future__ import annotations

import math

from gatedmodels.typedconfig import did_you_mean

from .baseline import resolve_baseline
from .comparison import Comparison, Effect, Row
from .environments import environments
from .interactions import interactions
from .levels import BASELINE_VALUES, level_order, sort_value
from .metrics import UNIFORM_FIRST_TOKEN, MetricSpec, choose
from .records import BASELINE_AXES, BASELINE_TEXT, RunRecord, StoreError, SweepRuns, finite, is_variant_setting
from .seedstats import Delta, Stat, apply_holm, describe, holm, paired, t_quantile, t_two_sided_p

MAX_LISTED_METRICS = 24
"""Logged metrics an unknown --metrics name's message lists."""

__all__ = [
    "BASELINE_VALUES",
    "Comparison",
    "Delta",
    "Effect",
    "Row",
    "Stat",
    "apply_holm",
    "compare",
    "describe",
    "holm",
    "is_seed_axis",
    "main_effects",
    "paired",
    "sort_value",
    "t_quantile",
    "t_two_sided_p",
    "together",
]


def is_seed_axis(path: str) -> bool:
    """`train.seed`, `data.bigram.seed`, ...: axes that replicate a configuration."""
    return path.rsplit(".", 1)[-1] == "seed"


def compare(sweep: SweepRuns, metrics: list[str] | None = None, baseline: dict[str, str] | None = None) -> Comparison:
    """Group the sweep's runs into rows and compute every statistic the report shows.

    `baseline` adds axis values the baseline row must have besides `BASELINE_AXES`, e.g.
    {"model.ffn_dim": "395"} for a parameter-matched baseline: those axes then join the
    architecture axes, and every other row is compared with that row at equal remaining axes."""
    axes = [p for p in sweep.axes if not is_seed_axis(p)]
    seed_axes = [p for p in sweep.axes if is_seed_axis(p)]
    _check_metrics(sweep, metrics)
    levels = level_order(sweep, axes)

    groups: dict[tuple, list[RunRecord]] = {}
    for run in sweep.runs:
        run.superseded = False
        groups.setdefault(tuple(run.axes.get(p, "?") for p in axes), []).append(run)

    rows: list[Row] = []
    unfinished: list[RunRecord] = []
    superseded: list[RunRecord] = []
    for key in sorted(groups, key=lambda k: tuple(levels[p].index(v) for p, v in zip(axes, k))):
        runs = groups[key]
        cells: dict[tuple, list[RunRecord]] = {}
        for run in runs:
            seed = tuple(run.axes.get(p, run.params.get(p, "?")) for p in seed_axes)
            cells.setdefault(seed, []).append(run)
        counted: dict[tuple, RunRecord] = {}
        for seed, cell in cells.items():
            # the newest finished run counts; without one, the newest run stands for the cell
            cell.sort(key=lambda r: (r.finished, r.start_time), reverse=True)
            head, rest = cell[0], cell[1:]
            for r in rest:
                r.superseded = True
                superseded.append(r)
            if head.finished:
                counted[seed] = head
            else:
                unfinished.append(head)
        rows.append(Row(axes=dict(zip(axes, key)), runs=sorted(runs, key=lambda r: r.name), counted=dict(sorted(counted.items()))))

    present = {k for row in rows for r in row.counted.values() for k, v in r.metrics.items() if finite(v)}
    specs = choose(present, metrics)
    for row in rows:
        for m in specs:
            row.stats[m.key] = describe({s: r.metrics[m.key] for s, r in row.counted.items() if m.key in r.metrics})

    reference = {**BASELINE_AXES, **resolve_baseline(sweep, baseline or {}, axes, levels)}
    _baselines(rows, axes, reference)
    for row in rows:
        if row.baseline is not None:
            for m in specs:
                d = paired(row.stats[m.key], row.baseline.stats[m.key])
                if d is not None:
                    row.deltas[m.key] = d
    tests = [d for row in rows for d in row.deltas.values() if d.p is not None]
    apply_holm(tests)
    _mark_best(rows, specs)
    uniform = [r.metrics[UNIFORM_FIRST_TOKEN] for row in rows for r in row.counted.values() if finite(r.metrics.get(UNIFORM_FIRST_TOKEN))]
    zipped = together(rows, axes)
    arch = [p for p in axes if p in reference or is_variant_setting(p)] if any(p in reference for p in axes) else []
    return Comparison(
        sweep=sweep,
        axes=axes,
        seed_axes=seed_axes,
        metrics=specs,
        rows=rows,
        effects=main_effects(rows, axes, specs, levels),
        together=zipped,
        levels=levels,
        arch_axes=arch,
        interactions=interactions(rows, axes, arch, levels, specs, {q for qs in zipped.values() for q in qs}),
        unfinished=sorted(unfinished, key=lambda r: r.name),
        superseded=sorted(superseded, key=lambda r: r.name),
        uniform_first_token=(sum(uniform) / len(uniform)) if uniform else None,
        n_tests=len(tests),
        baseline_text=", ".join([BASELINE_TEXT, *(f"{k}={v}" for k, v in (baseline or {}).items())]),
        environments=environments(r for row in rows for r in row.counted.values()),
    )


def _check_metrics(sweep: SweepRuns, metrics: list[str] | None) -> None:
    """StoreError for a --metrics name no run of the sweep logged, with the closest logged names:
    a typo must not become an empty column (or an empty report)."""
    if not metrics:
        return
    logged = sorted({k for r in sweep.runs for k in r.metrics})
    unknown = [m for m in metrics if m not in logged]
    if not unknown:
        return
    named = ", ".join(f"{m!r}{did_you_mean(m, logged)}" for m in unknown)
    top = [k for k in logged if "/layer_" not in k and not k.startswith("system/")]  # per-layer and system metrics not listed
    shown = ", ".join(top[:MAX_LISTED_METRICS]) + (f", ... ({len(top) - MAX_LISTED_METRICS} more)" if len(top) > MAX_LISTED_METRICS else "")
    what = "is not a metric" if len(unknown) == 1 else "are not metrics"
    raise StoreError(f"--metrics: {named} {what} of sweep {sweep.name}; its runs logged: {shown or 'none'}")


def _baselines(rows: list[Row], axes: list[str], reference: dict[str, str]) -> None:
    """Link each row that departs from the baseline (`reference`: the architecture axes'
    baseline values, a gate `none` and softmax attention, plus the user's) to the baseline row
    with the other axes equal; an attention kind's own settings (`records.KIND_SETTINGS`) are
    part of the variant, not axes to match."""
    arch = [p for p in axes if p in reference]
    if not arch:
        return
    others = [p for p in axes if p not in reference and not is_variant_setting(p)]
    base = {tuple(r.axes[p] for p in others): r for r in rows if all(r.axes[p] == reference[p] for p in arch)}
    for row in rows:
        if all(row.axes[p] == reference[p] for p in arch):
            row.is_baseline = True
        else:
            row.baseline = base.get(tuple(row.axes[p] for p in others))


def _mark_best(rows: list[Row], specs: list[MetricSpec]) -> None:
    """Mark the best mean of each column where it is significantly better (after Holm): a row
    whose Δ against its baseline is significant, or a baseline row from which every row compared
    with it differs significantly. Noise never gets the mark."""
    for m in specs:
        if m.better is None:
            continue
        means = [(row, row.stats[m.key].mean) for row in rows if row.stats[m.key].mean is not None]
        if len(means) < 2 or len({v for _, v in means}) == 1:
            continue  # all equal: nothing stands out
        pick = min if m.better == "min" else max
        best = pick(v for _, v in means)
        for row, v in means:
            if v == best and _significantly_best(row, rows, m.key):
                row.best.add(m.key)


def _significantly_best(row: Row, rows: list[Row], key: str) -> bool:
    if row.baseline is not None:
        d = row.deltas.get(key)
        return d is not None and d.significant
    if row.is_baseline:
        compared = [r for r in rows if r.baseline is row and r.stats[key].mean is not None]
        return bool(compared) and all(key in r.deltas and r.deltas[key].significant for r in compared)
    return False


def together(rows: list[Row], axes: list[str]) -> dict[str, list[str]]:
    """Axis -> the later axes varied together with it (a zip group: their levels split the rows
    the same way), which add no main effect of their own."""
    out: dict[str, list[str]] = {}
    seen: dict[tuple, str] = {}
    for p in axes:
        groups: dict[str, list[int]] = {}
        for i, r in enumerate(rows):
            groups.setdefault(r.axes[p], []).append(i)
        key = tuple(sorted(tuple(g) for g in groups.values()))
        if key in seen:
            out.setdefault(seen[key], []).append(p)
        else:
            seen[key] = p
    return out


def main_effects(
    rows: list[Row], axes: list[str], specs: list[MetricSpec], levels: dict[str, list[str]] | None = None
) -> dict[str, list[Effect]]:
    """Axis -> one Effect per level, in `levels`' order (default: `sort_value`'s), only when more
    than one non-seed axis varies (with a single axis the comparison table already is its main
    effect). Axes varied together with an earlier one (`together`) are folded into it."""
    out: dict[str, list[Effect]] = {}
    if len(axes) < 2:
        return out
    folded = {q for qs in together(rows, axes).values() for q in qs}
    for p in axes:
        if p in folded:
            continue
        order = levels[p] if levels else sorted({r.axes[p] for r in rows}, key=sort_value)
        effects = []
        for level in order:
            at = [r for r in rows if r.axes[p] == level and r.n]
            means: dict[str, float | None] = {}
            for m in specs:
                vals = [r.stats[m.key].mean for r in at if r.stats[m.key].mean is not None]
                means[m.key] = math.fsum(vals) / len(vals) if vals else None
            effects.append(Effect(level, len(at), means))
        out[p] = effects
    return out
