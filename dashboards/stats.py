"""Seed statistics of a sweep: rows, means, confidence intervals, deltas, paired tests, main effects.

- **Rows** are distinct configurations: runs grouped by the values of every varying axis except
  the seed axes (`train.seed`, or any axis whose last part is `seed`). One run counts per seed
  cell: when a cell has several runs (a re-launch, a `--rerun`), the newest finished one counts
  and the others are listed as superseded, never dropped silently.
- **Statistics** over the finished seeds of a row, per metric: mean, sample standard deviation
  (ddof 1), and the 95% confidence interval of the mean, mean ± t(0.975, n-1)·std/√n (Student's
  t; none for n < 2).
- **Delta** against the baseline row: the row with gate `none` and every other non-seed axis
  equal (the paper's baseline, REFERENCE §2). Δ = mean(row) - mean(baseline), relative Δ in %
  of the baseline, and a paired t-test over the seeds both rows finished (two-sided, as
  scipy.stats.ttest_rel; needs at least 2 pairs and some variation in the differences).
- **Best** per column: the lowest (or highest) mean among rows, per the metric's direction
  (`dashboards.metrics`); metrics with no better side (the gate score) mark nothing.
- **Main effects** per axis: for each level, the metric averaged over the configurations at that
  level (each configuration's seed mean weighs the same), i.e. averaged over the other axes.

Metric values are the runs' final values (REFERENCE §3 defines them); only finished runs count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from orchestrator.tracking import STATES

from .metrics import UNIFORM_FIRST_TOKEN, MetricSpec, axis_text, choose
from .records import BASELINE_GATE, GATE_AXIS, RunRecord, SweepRuns, finite


def is_seed_axis(path: str) -> bool:
    """`train.seed`, `data.bigram.seed`, ...: axes that replicate a configuration."""
    return path.rsplit(".", 1)[-1] == "seed"


@dataclass
class Stat:
    """One metric of one row over its finished seeds."""

    values: dict[tuple, float]
    """Seed cell -> value."""
    n: int
    mean: float | None
    std: float | None
    """Sample standard deviation (ddof 1); None for n < 2."""
    ci95: float | None
    """Half-width of the 95% confidence interval of the mean (Student's t); None for n < 2."""

    @property
    def lo(self) -> float | None:
        return None if self.mean is None or self.ci95 is None else self.mean - self.ci95

    @property
    def hi(self) -> float | None:
        return None if self.mean is None or self.ci95 is None else self.mean + self.ci95


@dataclass
class Delta:
    """A row against its baseline on one metric."""

    diff: float
    rel: float | None
    """diff / |baseline mean|, in %; None when the baseline mean is 0."""
    n_pairs: int
    """Seeds finished by both rows."""
    t: float | None
    p: float | None
    """Two-sided p of the paired t-test; None with fewer than 2 pairs or no variation."""


@dataclass
class Row:
    """One configuration (every seed of it)."""

    axes: dict[str, str]
    """Non-seed axis -> value."""
    runs: list[RunRecord]
    """Every run of the configuration, in any state (superseded ones included)."""
    counted: dict[tuple, RunRecord]
    """Seed cell -> the run that counts (newest finished)."""
    stats: dict[str, Stat] = field(default_factory=dict)
    deltas: dict[str, Delta] = field(default_factory=dict)
    best: set[str] = field(default_factory=set)
    baseline: Row | None = None
    is_baseline: bool = False

    @property
    def key(self) -> tuple:
        return tuple(self.axes.values())

    @property
    def n(self) -> int:
        """Finished seeds."""
        return len(self.counted)

    def state_counts(self) -> dict[str, int]:
        """State -> runs, over the runs that count or stand for an unfinished seed cell."""
        out: dict[str, int] = {}
        for run in self.live_runs():
            out[run.state] = out.get(run.state, 0) + 1
        return dict(sorted(out.items(), key=lambda kv: STATES.index(kv[0])))

    def live_runs(self) -> list[RunRecord]:
        """The counted runs plus, per seed cell that finished nowhere, its newest run."""
        return [r for r in self.runs if not r.superseded]

    @property
    def status(self) -> str:
        """`ok` when every seed finished, else e.g. `1 failed, 1 running`."""
        counts = self.state_counts()
        rest = [f"{n} {s}" for s, n in counts.items() if s != "finished"]
        return ", ".join(rest) if rest else "ok"

    def label(self, axes: list[str] | None = None) -> str:
        """Compact name: `G1-elementwise, lr=0.003`."""
        axes = axes if axes is not None else list(self.axes)
        parts = []
        for p in axes:
            v = axis_text(self.axes[p])
            parts.append(v if p == GATE_AXIS or len(axes) == 1 else f"{p.rsplit('.', 1)[-1]}={v}")
        return ", ".join(parts) or "all runs"


@dataclass
class Effect:
    """Main effect of one axis level."""

    level: str
    configs: int
    """Configurations at this level with at least one finished seed."""
    means: dict[str, float | None]


@dataclass
class Comparison:
    """Everything a report shows, computed from a `SweepRuns`."""

    sweep: SweepRuns
    axes: list[str]
    """Non-seed axes that vary (the row key), in the sweep's order."""
    seed_axes: list[str]
    metrics: list[MetricSpec]
    rows: list[Row]
    effects: dict[str, list[Effect]]
    together: dict[str, list[str]]
    """Axis -> axes varied together with it (zipped), shown with it in main effects and plots."""
    unfinished: list[RunRecord]
    """Runs that count for a seed cell and did not finish (failed, stopped, running, ...)."""
    superseded: list[RunRecord]
    """Runs of a seed cell that has a newer or finished run."""
    uniform_first_token: float | None = None
    """What uniform attention would give for first_token_attn (the reference line)."""

    def axis_title(self, axis: str) -> str:
        """`train.lr`, or `train.lr (with train.grad_clip)` for a zipped group."""
        with_ = self.together.get(axis)
        return f"{axis} (with {', '.join(with_)})" if with_ else axis

    @property
    def has_baseline(self) -> bool:
        return any(r.is_baseline for r in self.rows)

    def state_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for row in self.rows:
            for s, n in row.state_counts().items():
                out[s] = out.get(s, 0) + n
        return dict(sorted(out.items(), key=lambda kv: STATES.index(kv[0])))


# ---- computations ---------------------------------------------------------------------------
def t_quantile(p: float, df: int) -> float:
    """Quantile of Student's t (scipy.special: scipy.stats alone takes ~1 s to import)."""
    from scipy.special import stdtrit

    return float(stdtrit(df, p))


def t_two_sided_p(t: float, df: int) -> float:
    """Two-sided p value of a t statistic with `df` degrees of freedom."""
    from scipy.special import stdtr

    return float(2.0 * stdtr(df, -abs(t)))


def describe(values: dict[tuple, float]) -> Stat:
    """Mean, sample std and 95% CI half-width (Student's t) of the finite values."""
    xs = [v for v in values.values() if finite(v)]
    n = len(xs)
    if n == 0:
        return Stat(values, 0, None, None, None)
    mean = math.fsum(xs) / n
    if n < 2:
        return Stat(values, n, mean, None, None)
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    return Stat(values, n, mean, std, t_quantile(0.975, n - 1) * std / math.sqrt(n))


def paired(row: Stat, base: Stat) -> Delta | None:
    """Δ of the means and the paired t-test over the seed cells both have."""
    if row.mean is None or base.mean is None:
        return None
    diff = row.mean - base.mean
    rel = 100.0 * diff / abs(base.mean) if base.mean else None
    keys = [k for k in row.values if k in base.values and finite(row.values[k]) and finite(base.values[k])]
    t = p = None
    if len(keys) >= 2:
        a = [row.values[k] for k in keys]
        b = [base.values[k] for k in keys]
        d = [x - y for x, y in zip(a, b)]
        if max(d) - min(d) > 1e-12 * max(1.0, max(abs(x) for x in d)):
            # the paired t-test (what scipy.stats.ttest_rel computes): t = mean(d) / (sd(d) / sqrt(n))
            n = len(d)
            mean_d = math.fsum(d) / n
            sd = math.sqrt(math.fsum((x - mean_d) ** 2 for x in d) / (n - 1))
            t = mean_d / (sd / math.sqrt(n))
            p = t_two_sided_p(t, n - 1)
    return Delta(diff, rel, len(keys), t, p)


def sort_value(v: str) -> tuple:
    """Order axis values: the baseline gate first, numbers numerically, then text."""
    if v == BASELINE_GATE:
        return (0, 0.0, "")
    try:
        return (1, float(v), "")
    except ValueError:
        return (2, 0.0, v)


def compare(sweep: SweepRuns, metrics: list[str] | None = None) -> Comparison:
    """Group the sweep's runs into rows and compute every statistic the report shows."""
    axes = [p for p in sweep.axes if not is_seed_axis(p)]
    seed_axes = [p for p in sweep.axes if is_seed_axis(p)]

    groups: dict[tuple, list[RunRecord]] = {}
    for run in sweep.runs:
        run.superseded = False
        groups.setdefault(tuple(run.axes.get(p, "?") for p in axes), []).append(run)

    rows: list[Row] = []
    unfinished: list[RunRecord] = []
    superseded: list[RunRecord] = []
    for key in sorted(groups, key=lambda k: tuple(sort_value(v) for v in k)):
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

    _baselines(rows, axes)
    for row in rows:
        if row.baseline is not None:
            for m in specs:
                d = paired(row.stats[m.key], row.baseline.stats[m.key])
                if d is not None:
                    row.deltas[m.key] = d
    _mark_best(rows, specs)
    uniform = [r.metrics[UNIFORM_FIRST_TOKEN] for row in rows for r in row.counted.values() if finite(r.metrics.get(UNIFORM_FIRST_TOKEN))]
    return Comparison(
        sweep=sweep,
        axes=axes,
        seed_axes=seed_axes,
        metrics=specs,
        rows=rows,
        effects=main_effects(rows, axes, specs),
        together=together(rows, axes),
        unfinished=sorted(unfinished, key=lambda r: r.name),
        superseded=sorted(superseded, key=lambda r: r.name),
        uniform_first_token=(sum(uniform) / len(uniform)) if uniform else None,
    )


def _baselines(rows: list[Row], axes: list[str]) -> None:
    """Link each gated row to the `none` row with the other axes equal."""
    if GATE_AXIS not in axes:
        return
    others = [p for p in axes if p != GATE_AXIS]
    base = {tuple(r.axes[p] for p in others): r for r in rows if r.axes[GATE_AXIS] == BASELINE_GATE}
    for row in rows:
        if row.axes[GATE_AXIS] == BASELINE_GATE:
            row.is_baseline = True
        else:
            row.baseline = base.get(tuple(row.axes[p] for p in others))


def _mark_best(rows: list[Row], specs: list[MetricSpec]) -> None:
    for m in specs:
        if m.better is None:
            continue
        means = [(row, row.stats[m.key].mean) for row in rows if row.stats[m.key].mean is not None]
        if len(means) < 2:
            continue
        if len({v for _, v in means}) == 1:
            continue  # all equal: nothing stands out
        pick = min if m.better == "min" else max
        best = pick(v for _, v in means)
        for row, v in means:
            if v == best:
                row.best.add(m.key)


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


def main_effects(rows: list[Row], axes: list[str], specs: list[MetricSpec]) -> dict[str, list[Effect]]:
    """Axis -> one Effect per level (only when more than one non-seed axis varies: with a single
    axis the comparison table already is its main effect). Axes varied together with an earlier
    one (`together`) are folded into it."""
    out: dict[str, list[Effect]] = {}
    if len(axes) < 2:
        return out
    folded = {q for qs in together(rows, axes).values() for q in qs}
    for p in axes:
        if p in folded:
            continue
        levels = sorted({r.axes[p] for r in rows}, key=sort_value)
        effects = []
        for level in levels:
            at = [r for r in rows if r.axes[p] == level and r.n]
            means: dict[str, float | None] = {}
            for m in specs:
                vals = [r.stats[m.key].mean for r in at if r.stats[m.key].mean is not None]
                means[m.key] = math.fsum(vals) / len(vals) if vals else None
            effects.append(Effect(level, len(at), means))
        out[p] = effects
    return out
