"""The comparison's tables as sections of neutral parts: the configurations (mean ± std, the best
per column emphasised), the 95% intervals, the Δ against the baseline with its p values, the seeds
needed, the interactions, the main effects, the runs that did not finish or were superseded, and
the numeric environments. One function each, (comparison, figures) -> parts ([] when it has
nothing to show); `dashboards.sections.SECTIONS` lists them in report order.

The heads are the full names (`model.gate`, `val_ppl`); `Table.short` has the terminal's short
ones (`gate`, `PPL`) and `Table.abbrev` what they stand for. A cell's tooltip (`Cell.note`) holds
what only the HTML shows: the intervals of a mean, the test of a Δ, the sentence of a seeds cell."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from orchestrator.core.parts import Cell, Part, Table, Text

from ..cells import (
    BEST_TEXT,
    DASH,
    NO_INTERVALS,
    axis_headers,
    boot_text,
    ci_text,
    column_legend,
    delta_boot_text,
    delta_text,
    has_intervals,
    interaction_text,
    interaction_title,
    mean_and_std,
    no_tests_note,
    p_pair_text,
    seeds_cell,
    seeds_cells,
    seeds_legend,
)
from ..comparison import Comparison
from ..environments import mixed_note, run_list
from ..metrics import axis_text, fmt
from ..seedstats import Stat

Figures = Sequence[tuple[Path | str, str]]

SIGNIFICANT = "significant at 0.05 after Holm's correction over the Δ table."


def _heads(comp: Comparison, middle: list[str], keys: list[str] | None = None) -> tuple[list[str], list[str]]:
    """(full heads, short heads): the key columns (default: the axes), `middle`, then the metrics."""
    short_axes = axis_headers(comp.axes)
    keys = list(comp.axes) if keys is None else keys
    full = keys + middle + [m.key for m in comp.metrics]
    short = [short_axes.get(k, k) for k in keys] + middle + [m.label for m in comp.metrics]
    return full, short


def _axes(comp: Comparison, values: dict[str, str]) -> list[str | Cell]:
    cells: list[str | Cell] = [axis_text(values.get(p, "?")) for p in comp.axes]
    return cells


def _mean_cell(stat: Stat, best: bool) -> Cell:
    mean, std = mean_and_std(stat)
    note = (
        ""
        if stat.mean is None
        else f"n={stat.n}"
        if stat.n < 2
        else f"n={stat.n}; 95% bootstrap {boot_text(stat)}; Student's t {ci_text(stat)}"
    )
    return Cell(mean, spread=std, strong=best, note=note)


def configurations(comp: Comparison, figures: Figures) -> list[Part]:
    """Per configuration: n, status and each metric's mean ± std over the finished seeds."""
    head, short = _heads(comp, ["n", "status"])
    rows = [
        _axes(comp, row.axes) + [str(row.n), row.status] + [_mean_cell(row.stats[m.key], m.key in row.best) for m in comp.metrics]
        for row in comp.rows
    ]
    strong = BEST_TEXT[0].lower() + BEST_TEXT[1:]
    legend = (
        "Lower is better except MMLU, RULER and throughput; the gate score has no better side. n: finished seeds. "
        "status: `ok` when every seed finished. –: not logged (the gate score of an ungated model) or no finished seed."
    )
    keys = len(comp.axes) + 2
    return [Table("", head, rows, legend, keys=keys, short=short, abbrev=column_legend(comp), strong=strong, name="configurations")]


def intervals(comp: Comparison, figures: Figures) -> list[Part]:
    """The 95% percentile bootstrap interval of each mean (Student's t in the cell's note)."""
    if not has_intervals(comp):
        return [Text([NO_INTERVALS])]
    head, short = _heads(comp, ["n"])
    rows = [
        _axes(comp, r.axes)
        + [str(r.n)]
        + [Cell(boot_text(r.stats[m.key]), note=f"Student's t: {ci_text(r.stats[m.key])}") for m in comp.metrics]
        for r in comp.rows
    ]
    legend = (
        "2.5th and 97.5th percentiles of the means of the seeds resampled with replacement (every resample for ≤ 6 seeds): "
        "inside the values' range, never below 0 for a non-negative metric, but close to that range with 2–3 seeds; "
        "Student's t interval, mean ± t(0.975, n−1)·std/√n, in report.csv. None for n < 2."
    )
    return [Table("", head, rows, legend, keys=len(comp.axes), short=short, abbrev=column_legend(comp), name="ci")]


def deltas(comp: Comparison, figures: Figures) -> list[Part]:
    """Each row's Δ against its baseline row (the other axes equal), with its paired-test p values."""
    note = no_tests_note(comp)
    head, short = _heads(comp, ["pairs"])
    rows = []
    for row in comp.rows:
        if row.baseline is None:
            continue
        cells = _axes(comp, row.axes) + [str(max((d.n_pairs for d in row.deltas.values()), default=0))]
        for m in comp.metrics:
            d = row.deltas.get(m.key)
            if d is None:
                cells.append(DASH)
                continue
            base = row.baseline.stats[m.key]
            tip = "" if note else f"95% bootstrap {delta_boot_text(d, base)}"
            tip += f"; t={d.t:.3f}; seeds for 80% power (power now): {seeds_cell(d)}" if d.t is not None else ""
            cells.append(Cell(delta_text(d, base), detail="" if note else p_pair_text(d), strong=d.significant, note=tip))
        rows.append(cells)
    if not rows:
        return []
    legend = (
        f"Δ = mean − baseline mean (relative Δ). {note}"
        if note
        else "Δ = mean − baseline mean (relative Δ); p: two-sided paired t-test over the seeds both finished (none with fewer "
        f"than 2 pairs); Holm: p adjusted by Holm's method over the {comp.n_tests} tests of this table."
    )
    strong = "" if note else SIGNIFICANT
    return [Table("", head, rows, legend, keys=len(comp.axes), short=short, abbrev=column_legend(comp), strong=strong, name="deltas")]


def seeds(comp: Comparison, figures: Figures) -> list[Part]:
    """Per comparison and metric, the seeds 80% power takes (the whole sentence in the note)."""
    header, body, notes = seeds_cells(comp)
    if not body or no_tests_note(comp):  # one seed: the Δ section says what the tests need
        return []
    head, short = _heads(comp, ["pairs"])
    rows: list[list[str | Cell]] = [[Cell(c, note=n) if n else c for c, n in zip(cells, says)] for cells, says in zip(body, notes)]
    return [Table("", head, rows, seeds_legend(comp), keys=len(comp.axes), short=short, abbrev=column_legend(comp), name="seeds")]


def interactions(comp: Comparison, figures: Figures) -> list[Part]:
    """Each arm's Δ at every level of each other axis, one table per axis."""
    out: list[Part] = []
    for k, inter in enumerate(comp.interactions):
        rows: list[list[str | Cell]] = []
        for m in comp.metrics:
            table = inter.cells.get(m.key) or {}
            for arm in inter.arms if table else ():
                cells: list[str | Cell] = [m.key, arm]
                for c in table[arm]:
                    tip = "" if c.delta is None else f"{p_pair_text(c.delta)}; 95% bootstrap {delta_boot_text(c.delta, c.base)}"
                    cells.append(Cell(interaction_text(c), strong=c.significant, note=tip))
                rows.append(cells)
        last = k == len(comp.interactions) - 1
        legend = (
            f"Each arm's Δ against the baseline ({comp.baseline_text}) at each level, the other axes equal; (mean of k): "
            "averaged over k configurations of the remaining axes (no test of its own)."
        )
        head = ["metric", "arm"] + [axis_text(v) for v in inter.levels]
        title = interaction_title(comp, inter)
        strong = SIGNIFICANT if last else ""
        out.append(Table(title, head, rows, legend if last else "", keys=2, strong=strong, name=f"interaction-{inter.axis}"))
    return out


def effects(comp: Comparison, figures: Figures) -> list[Part]:
    """Each axis' main effect: every metric averaged over the other axes, level by level."""
    out: list[Part] = []
    for axis, levels in comp.effects.items():
        head, short = _heads(comp, ["configs"], [axis])
        rows: list[list[str | Cell]] = [[axis_text(e.level), str(e.configs), *(fmt(e.means[m.key]) for m in comp.metrics)] for e in levels]
        title = f"Main effect of {comp.axis_title(axis)} (mean over the other axes)"
        out.append(Table(title, head, rows, keys=1, short=short, abbrev=column_legend(comp), name=f"effect-{axis}"))
    return out


def _runs(comp: Comparison, runs: list, name: str) -> list[Part]:
    if not runs:
        return []
    head = ["run", "state", "reason"] + list(comp.axes) + ["run id"]
    short = ["run", "state", "reason"] + list(axis_headers(comp.axes).values()) + ["run id"]
    rows = [[r.name, r.state, r.reason or DASH] + _axes(comp, r.axes) + [r.run_id] for r in runs]
    return [Table("", head, rows, keys=3, short=short, abbrev=column_legend(comp, labels=False), name=name)]


def unfinished(comp: Comparison, figures: Figures) -> list[Part]:
    """The runs that did not finish (failed, killed, still running)."""
    return _runs(comp, comp.unfinished, "unfinished")


def superseded(comp: Comparison, figures: Figures) -> list[Part]:
    """Older runs of seed cells that have a newer or finished run (not counted)."""
    return _runs(comp, comp.superseded, "superseded")


def numerics(comp: Comparison, figures: Figures) -> list[Part]:
    """The numeric environments, when the counted runs come from more than one."""
    note = mixed_note(comp.environments)
    if not note:
        return []
    rows: list[list[str | Cell]] = [[env.label, env.key, str(len(env.runs)), run_list(env.runs)] for env in comp.environments]
    return [Text([note[0].upper() + note[1:] + "."]), Table("", ["environment", "key", "runs", "names"], rows, keys=4, name="numerics")]
