"""Cells every rendering of a `Comparison` shares (tables_*.py, html.py): axis headers, mean ± std,
intervals (bootstrap and Student's t), deltas, p values (raw and Holm-adjusted), the power and
seeds-needed line of each comparison, state counts and the header lines."""

from __future__ import annotations

from orchestrator.core import metrics as registry

from .comparison import Comparison
from .metrics import FIRST_TOKEN, axis_text, decimals, fmt
from .records import GATE_AXIS
from .seedstats import ALPHA, MAX_SEEDS, TARGET_POWER, Delta, Stat

DASH = "–"
BEST_TEXT = (
    "Best per column: marked only where significantly better after Holm (a row whose Δ against its baseline is "
    "significant, or a baseline every row compared with it differs from significantly)."
)


def axis_headers(axes: list[str]) -> dict[str, str]:
    """Short axis names (`gate`, `lr`); the full path where two axes share a last part."""
    leaves = [("gate" if p == GATE_AXIS else p.rsplit(".", 1)[-1]) for p in axes]
    return {p: (leaf if leaves.count(leaf) == 1 else p) for p, leaf in zip(axes, leaves)}


def mean_std(stat: Stat, sep: str = " ± ") -> str:
    mean, std = mean_and_std(stat)
    return f"{mean}{sep}{std}" if std else mean


def mean_and_std(stat: Stat) -> tuple[str, str]:
    """The mean and the std over seeds at the mean's decimals (`–` and "" without a value; "" std
    with one seed)."""
    if stat.mean is None:
        return DASH, ""
    d = decimals(stat.mean)
    return fmt(stat.mean, d), "" if stat.std is None else fmt(stat.std, d)


def ci_text(stat: Stat) -> str:
    if stat.mean is None or stat.ci95 is None:
        return DASH
    d = decimals(stat.mean)
    return f"[{fmt(stat.lo, d)}, {fmt(stat.hi, d)}]"


def boot_text(stat: Stat) -> str:
    """The 95% percentile bootstrap interval of the mean, `[lo, hi]`."""
    if stat.mean is None or stat.boot_lo is None or stat.boot_hi is None:
        return DASH
    d = decimals(stat.mean)
    return f"[{fmt(stat.boot_lo, d)}, {fmt(stat.boot_hi, d)}]"


def delta_boot_text(delta: Delta, base: Stat | None) -> str:
    """The bootstrap interval of the mean paired difference, `[lo, hi]`."""
    if delta.boot_lo is None or delta.boot_hi is None:
        return DASH
    d = decimals(base.mean) if base is not None and base.mean is not None else decimals(delta.diff)
    return f"[{fmt(delta.boot_lo, d)}, {fmt(delta.boot_hi, d)}]"


def p_text(p: float | None) -> str:
    if p is None:
        return DASH
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def delta_text(delta: Delta | None, base: Stat | None, *, relative: bool = True) -> str:
    if delta is None:
        return DASH
    d = decimals(base.mean) if base is not None and base.mean is not None else decimals(delta.diff)
    text = f"{delta.diff:+,.0f}" if d == 0 else f"{delta.diff:+.{d}f}"
    if relative and delta.rel is not None:
        text += f" ({delta.rel:+.1f}%)"
    return text


def p_pair_text(delta: Delta, sep: str = ", ") -> str:
    """`p 0.014, Holm 0.042` (`p –` without a test)."""
    if delta.p is None:
        return f"p {DASH}"
    return f"p {p_text(delta.p)}{sep}Holm {p_text(delta.p_holm)}"


def _seeds(k: int | None) -> str:
    return str(k) if k is not None else f">{MAX_SEEDS}"


def seeds_cell(delta: Delta | None) -> str:
    """Seeds for 80% power at α 0.05 / at Holm's α/m, with the power now: `2/3 (1.00)`; `–`
    without a test."""
    if delta is None or delta.power is None:
        return DASH
    holm = f"/{_seeds(delta.seeds_needed_holm)}" if delta.power_holm is not None else ""
    return f"{_seeds(delta.seeds_needed)}{holm} ({delta.power:.2f})"


def seeds_line(comp: Comparison, row, metric: str) -> str | None:
    """One sentence per comparison: Δ with its bootstrap interval, p and Holm p, the power of
    the paired test with the seeds there are, and the seeds 80% power would take, at α 0.05 and
    at α/m (the level Holm's method holds the smallest of the table's m p values to)."""
    d = row.deltas.get(metric)
    if d is None or row.baseline is None:
        return None
    base = row.baseline.stats.get(metric)
    head = f"{row.label(comp.axes)} vs {row.baseline.label(comp.axes)}, {metric}: Δ {delta_text(d, base)}"
    if d.n_pairs < 2:
        seeds = f"{d.n_pairs} paired seed" + ("" if d.n_pairs == 1 else "s")
        return f"{head}; {seeds}: no test, no interval; at least 2 seeds are needed (3 or more to judge the power)."
    head += f", 95% bootstrap {delta_boot_text(d, base)}"
    if d.p is None or d.power is None:
        return f"{head}; the {d.n_pairs} paired differences are identical: no variation, no test."
    verdict = "significant" if d.significant else "not significant"
    text = f"{head}; p {p_text(d.p)}, Holm {p_text(d.p_holm)} ({verdict} at {ALPHA:g} over {comp.n_tests} tests)"
    text += f"; {TARGET_POWER:.0%} power takes {_seeds(d.seeds_needed)} seeds at α {ALPHA:g} (power with {d.n_pairs}: {d.power:.2f})"
    if d.power_holm is None or comp.n_tests < 2:
        need = d.seeds_needed
    else:
        text += f", {_seeds(d.seeds_needed_holm)} at α/{comp.n_tests} (power with {d.n_pairs}: {d.power_holm:.2f})"
        need = d.seeds_needed_holm
    if need is None:
        return f"{text}: the Δ is small against its spread."
    if need <= d.n_pairs:
        return f"{text}: enough seeds."
    return f"{text}: run {need} seeds before trusting this Δ."


def seeds_cells(comp: Comparison) -> tuple[list[str], list[list[str]], list[list[str]]]:
    """The seeds-needed table: header, body (per compared row: its axes, its pairs, then per
    metric `seeds_cell`) and, per body cell, the sentence of `seeds_line` (the HTML's tooltip)."""
    header = list(comp.axes) + ["pairs"] + [m.key for m in comp.metrics]
    body, notes = [], []
    for row in comp.rows:
        if row.baseline is None:
            continue
        cells = [axis_text(row.axes[p]) for p in comp.axes]
        cells.append(str(max((d.n_pairs for d in row.deltas.values()), default=0)))
        says = [""] * len(cells)
        for m in comp.metrics:
            cells.append(seeds_cell(row.deltas.get(m.key)))
            says.append(seeds_line(comp, row, m.key) or "")
        body.append(cells)
        notes.append(says)
    return header, body, notes


SEEDS_LEGEND = (
    "Each cell: the seeds that give the paired t-test {power:.0%} power to detect the observed Δ at α {alpha:g} / at α/m "
    "(Holm's strictest level over the m = {m} tests), and in brackets its power with the seeds there are; "
    "run more seeds before trusting a Δ whose count is above the pairs. –: no test (fewer than 2 pairs, or identical differences)."
)


def seeds_legend(comp: Comparison) -> str:
    return SEEDS_LEGEND.format(power=TARGET_POWER, alpha=ALPHA, m=comp.n_tests)


def interaction_text(cell) -> str:
    """One arm's Δ at one level: `-0.312` (the row's Δ), `-0.298 (mean of 3)` over several rows,
    `–` without one."""
    if cell.diff is None:
        return DASH
    base = cell.base.mean if cell.base is not None and cell.base.mean is not None else None
    d = decimals(base) if base is not None else decimals(cell.diff)
    text = f"{cell.diff:+,.0f}" if d == 0 else f"{cell.diff:+.{d}f}"
    return f"{text} (mean of {cell.rows})" if cell.rows > 1 else text


def interaction_title(comp: Comparison, inter) -> str:
    return f"Δ against the baseline at each level of {comp.axis_title(inter.axis)}"


def seeds_lines(comp: Comparison) -> list[str]:
    """`seeds_line` of every comparison in the Δ table, row by row."""
    out = []
    for row in comp.rows:
        for m in comp.metrics:
            line = seeds_line(comp, row, m.key)
            if line:
                out.append(line)
    return out


def status_counts(comp: Comparison) -> str:
    return ", ".join(f"{n} {s}" for s, n in comp.state_counts().items()) or "no runs"


MIN_TEST_SEEDS = 2
"""Paired seeds a paired t-test needs (3 or more to judge its power)."""


def no_tests_note(comp: Comparison) -> str | None:
    """One sentence for a report whose Δ table has no test at all because no configuration has
    2 seeds paired with its baseline (a 1-seed sweep); None otherwise."""
    if comp.n_tests or not any(r.baseline is not None for r in comp.rows):
        return None
    most = max((d.n_pairs for r in comp.rows for d in r.deltas.values()), default=0)
    if most >= MIN_TEST_SEEDS:
        return None
    return (
        f"No tests: {'one seed' if most <= 1 else f'{most} seeds'} per configuration, and a paired t-test needs at least "
        f"{MIN_TEST_SEEDS} seeds of both configurations (3 or more to judge its power); the Δ shown are single differences. "
        "Run more seeds, e.g. --grid train.seed=0,1,2."
    )


def has_intervals(comp: Comparison) -> bool:
    """Whether any configuration has the 2 or more finished seeds an interval needs."""
    return any(r.n >= MIN_TEST_SEEDS for r in comp.rows)


NO_INTERVALS = "No intervals: one finished seed per configuration (an interval of the mean needs 2 or more)."


def column_legend(comp: Comparison, *, labels: bool = True) -> str:
    """What each abbreviated column header stands for: the metrics' short labels (`labels`, the
    terminal's) and the axes' short names (`gate` for `model.gate`)."""

    parts = [f"{head} = {path}" for path, head in axis_headers(comp.axes).items() if head != path]
    for m in comp.metrics if labels else []:
        if m.label == m.key:
            continue
        entry = registry.lookup(m.key)
        meaning = entry.paper if entry is not None and entry.paper not in ("", m.label, m.key) else ""
        parts.append(f"{m.label} = {m.key}" + (f" ({meaning})" if meaning else ""))
    return ("Columns: " + "; ".join(parts) + ".") if parts else ""


def header_lines(comp: Comparison) -> list[str]:
    s = comp.sweep
    lines = [
        f"sweep {s.name}: {status_counts(comp)}; experiment {s.experiment!r}, parent run {s.parent.run_id}"
        + (f" (newest of {s.launches} launches)" if s.launches > 1 else "")
    ]
    seeds = ", ".join(comp.seed_axes) or "none (one run per configuration)"
    lines.append(f"rows: configurations; seeds grouped over {seeds}. Values: mean ± std over finished seeds (n); final values of each run.")
    if any(len(v) > 1 for v in comp.levels.values()):
        lines.append("Levels of each axis in the sweep's order (model sizes by size).")
    if has_intervals(comp):
        lines.append("Intervals: 95% percentile bootstrap of the mean over seeds (exact for ≤ 6 seeds); Student's t in report.csv.")
    else:
        lines.append(NO_INTERVALS)
    note = no_tests_note(comp)
    if comp.has_baseline and note:
        lines.append(f"Δ: against the baseline row ({comp.baseline_text}) with the other axes equal. {note}")
    elif comp.has_baseline:
        lines.append(
            f"Δ: against the baseline row ({comp.baseline_text}) with the other axes equal; p: paired t-test over matching seeds, "
            + (
                f"Holm-adjusted over the {comp.n_tests} tests of the Δ table"
                if comp.n_tests
                else "none here (a test needs 2 paired seeds whose differences vary)"
            )
            + f"; seeds needed: for {TARGET_POWER:.0%} power at α {ALPHA:g}."
        )
        lines.append(BEST_TEXT)
    if comp.uniform_first_token is not None and any(m.key == FIRST_TOKEN for m in comp.metrics):
        lines.append(f"{FIRST_TOKEN} under uniform attention: {comp.uniform_first_token:.3f}.")
    return lines
