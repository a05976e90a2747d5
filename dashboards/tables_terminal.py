"""The terminal table of a `Comparison`: fits a width (100 columns by default); metric columns
that do not fit go to a further block that repeats the axis columns, like a wide data frame;
then the deltas against the baseline, the seeds needed, the main effects, the interactions
(each arm's Δ at every level of each other axis) and the runs that did not finish."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from orchestrator.core.printable import terminal as printable

from .cells import (
    DASH,
    axis_headers,
    column_legend,
    delta_text,
    has_intervals,
    header_lines,
    interaction_cells,
    interaction_title,
    mean_std,
    no_tests_note,
    p_text,
    seeds_cell,
)
from .comparison import Comparison
from .environments import mixed_note
from .metrics import axis_text, fmt
from .sections import SECTIONS, writers


def _align(cells: list[list[str]], right: Sequence[bool]) -> list[list[str]]:
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    return [[c.rjust(w) if right[i] else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))] for r in cells]


def _fit_blocks(fixed: list[list[str]], columns: list[list[str]], width: int, gap: int = 2) -> list[list[int]]:
    """Split column indices into blocks that fit beside the fixed columns."""
    fixed_w = sum(max(len(r[i]) for r in fixed) + gap for i in range(len(fixed[0]))) if fixed and fixed[0] else 0
    blocks: list[list[int]] = [[]]
    used = fixed_w
    for j, col in enumerate(columns):
        w = max(len(c) for c in col) + gap
        if blocks[-1] and used + w > width:
            blocks.append([])
            used = fixed_w
        blocks[-1].append(j)
        used += w
    return blocks


def _terminal_grid(header: list[str], body: list[list[str]], n_fixed: int, width: int) -> list[str]:
    """Rows of cells -> text lines, the columns after `n_fixed` split into width-fitting blocks."""
    if not body:
        return []
    table = [[printable(c) for c in r] for r in [header] + body]  # no terminal control characters from the store
    fixed = [r[:n_fixed] for r in table]
    cols = [[r[j] for r in table] for j in range(n_fixed, len(header))]
    out: list[str] = []
    for b, block in enumerate(_fit_blocks(fixed, cols, width)):
        cells = [r[:n_fixed] + [r[n_fixed + j] for j in block] for r in table]
        right = [False] * n_fixed + [True] * len(block)
        aligned = _align(cells, right)
        if b:
            out.append("")
        out.append("  ".join(aligned[0]).rstrip())
        out.append("  ".join("-" * len(c) for c in aligned[0]))
        out += ["  ".join(r).rstrip() for r in aligned[1:]]
    return out


def terminal(comp: Comparison, width: int = 100) -> str:
    """The comparison for a terminal of `width` columns."""
    heads = axis_headers(comp.axes)
    lines = []
    for ln in header_lines(comp):
        lines += textwrap.wrap(ln, width) or [""]
    lines.append("")
    header = [heads[p] for p in comp.axes] + ["n", "status"] + [m.label for m in comp.metrics]
    body = []
    for row in comp.rows:
        cells = [axis_text(row.axes[p]) for p in comp.axes] + [str(row.n), row.status]
        for m in comp.metrics:
            text = mean_std(row.stats[m.key], "±")
            cells.append(text + ("*" if m.key in row.best else ""))
        body.append(cells)
    lines += _terminal_grid(header, body, len(comp.axes) + 2, width)
    intervals = "95% bootstrap intervals: report.md / report.html." if has_intervals(comp) else "No intervals with one seed."
    lines += textwrap.wrap(f"* best per column where significantly better after Holm; ± std over seeds. {intervals}", width)
    legend = column_legend(comp)
    lines += textwrap.wrap(legend, width)

    lines += _delta_lines(comp, heads, legend, width)

    for axis, effects in comp.effects.items():
        lines += ["", f"main effect of {comp.axis_title(axis)} (mean over the other axes)"]
        header = [heads[axis], "configs"] + [m.label for m in comp.metrics]
        body = [[axis_text(e.level), str(e.configs)] + [fmt(e.means[m.key]) for m in comp.metrics] for e in effects]
        lines += _terminal_grid(header, body, 2, width) + textwrap.wrap(legend, width)

    for inter in comp.interactions:
        lines += [""] + textwrap.wrap(f"{interaction_title(comp, inter)} (+ : significant at 0.05 after Holm)", width)
        header, body = interaction_cells(comp, inter, mark="+")
        lines += _terminal_grid(header, body, 2, width)

    lines += _problem_lines(comp, width)
    for section in SECTIONS:
        text = writers.terminal(section.parts(comp, ()))
        if text:
            lines.append(text)
    return "\n".join(lines) + "\n"


def _delta_lines(comp: Comparison, heads: dict[str, str], legend: str, width: int) -> list[str]:
    """The Δ table against the baseline and the seeds-needed table; with one seed, the differences
    and one sentence saying why there are no tests."""
    lines: list[str] = []
    drows = [r for r in comp.rows if r.baseline is not None]
    note = no_tests_note(comp)
    if drows and note:  # one seed: the differences, and one sentence instead of tests and powers
        lines += [""] + textwrap.wrap(f"Δ vs the baseline ({comp.baseline_text}; same other axes). {note}", width)
        header = [heads[p] for p in comp.axes] + [m.label for m in comp.metrics]
        body = [
            [axis_text(row.axes[p]) for p in comp.axes]
            + [delta_text(row.deltas.get(m.key), row.baseline.stats[m.key], relative=False) for m in comp.metrics]
            for row in drows
        ]
        lines += _terminal_grid(header, body, len(comp.axes), width) + textwrap.wrap(legend, width)
    elif drows:
        lines += [""] + textwrap.wrap(
            f"Δ vs the baseline ({comp.baseline_text}; same other axes); p: paired t-test over matching seeds, [Holm-adjusted over the {comp.n_tests} "
            "tests of this table]; + : significant at 0.05 after Holm",
            width,
        )
        header = [heads[p] for p in comp.axes] + ["pairs"] + [m.label for m in comp.metrics]
        body, seeds = [], []
        for row in drows:
            cells = [axis_text(row.axes[p]) for p in comp.axes]
            pairs = max((d.n_pairs for d in row.deltas.values()), default=0)
            cells.append(str(pairs))
            need = [*cells]
            for m in comp.metrics:
                d = row.deltas.get(m.key)
                if d is None:
                    cells.append(DASH)
                else:
                    holm = f" [{p_text(d.p_holm)}]" if d.p_holm is not None else ""
                    cells.append(
                        f"{delta_text(d, row.baseline.stats[m.key], relative=False)} p={p_text(d.p)}{holm}" + ("+" if d.significant else "")
                    )
                need.append(seeds_cell(d))
            body.append(cells)
            seeds.append(need)
        lines += _terminal_grid(header, body, len(comp.axes) + 1, width) + textwrap.wrap(legend, width)
        lines += [""] + textwrap.wrap(
            f"seeds for 80% power to detect the observed Δ: at α 0.05 / at α/{comp.n_tests} (Holm's strictest level); "
            "in brackets the power at α 0.05 with the seeds there are",
            width,
        )
        lines += _terminal_grid(header, seeds, len(comp.axes) + 1, width) + textwrap.wrap(legend, width)
    return lines


def _problem_lines(comp: Comparison, width: int) -> list[str]:
    out = []
    if comp.unfinished:
        out += ["", "not finished:"]
        for r in comp.unfinished:
            text = f"{r.name}  {r.state}" + (f": {r.reason}" if r.reason else "") + f"  (run {r.run_id})"
            out += textwrap.wrap(text, width, initial_indent="  ", subsequent_indent="      ")
    if comp.superseded:
        states: dict[str, int] = {}
        for r in comp.superseded:
            states[r.state] = states.get(r.state, 0) + 1
        text = (
            f"superseded: {len(comp.superseded)} older runs of seed cells that have a newer or finished run ("
            + ", ".join(f"{n} {s}" for s, n in states.items())
            + "); listed in report.md"
        )
        out += [""] + textwrap.wrap(text, width)
    note = mixed_note(comp.environments)
    if note:
        out += [""] + textwrap.wrap(f"numerics: {note}", width)
        for env in comp.environments:
            text = f"{len(env.runs)} run(s), {env.key}: {printable(env.label)}"
            out += textwrap.wrap(text, width, initial_indent="  ", subsequent_indent="      ")
    return out
