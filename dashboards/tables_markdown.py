"""The markdown report of a `Comparison`: pipe tables padded so that the raw text lines up
(MLflow's artifact viewer shows the raw file), best values in **bold**, the cells of each table
(`comparison_cells`, `ci_cells`, `delta_cells`, `effect_cells`, `problem_cells`) and the
report's sections, one function each (`MD_SECTIONS`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from orchestrator.core.printable import markdown_cell

from .cells import (
    BEST_TEXT,
    DASH,
    NO_INTERVALS,
    boot_text,
    delta_text,
    has_intervals,
    header_lines,
    interaction_cells,
    interaction_legend,
    interaction_title,
    mean_std,
    no_tests_note,
    p_pair_text,
    seeds_cells,
    seeds_legend,
)
from .comparison import Comparison
from .environments import mixed_note, run_list
from .metrics import axis_text, fmt
from .sections import SECTIONS, writers


def _md_table(header: list[str], body: list[list[str]], right: Sequence[bool] | None = None) -> list[str]:
    """A pipe table whose raw text lines up."""
    esc = [[markdown_cell(c) for c in r] for r in [header] + body]  # values from a shared sweep file or the store
    right = right or [False] * len(header)
    widths = [max(3, *(len(r[i]) for r in esc)) for i in range(len(header))]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(esc[0], widths)) + " |",
        "|" + "|".join(("-" * (w + 1) + ":") if right[i] else ("-" * (w + 2)) for i, w in enumerate(widths)) + "|",
    ]
    for r in esc[1:]:
        lines.append("| " + " | ".join(c.rjust(w) if right[i] else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))) + " |")
    return lines


def comparison_cells(comp: Comparison, bold: Callable[[str], str]) -> tuple[list[str], list[list[str]]]:
    """Header and body of the main table: axes, n, status, metrics as mean ± std."""
    header = list(comp.axes) + ["n", "status"] + [m.key for m in comp.metrics]
    body = []
    for row in comp.rows:
        cells = [axis_text(row.axes[p]) for p in comp.axes] + [str(row.n), row.status]
        for m in comp.metrics:
            text = mean_std(row.stats[m.key])
            cells.append(bold(text) if m.key in row.best else text)
        body.append(cells)
    return header, body


def ci_cells(comp: Comparison) -> tuple[list[str], list[list[str]]]:
    header = list(comp.axes) + ["n"] + [m.key for m in comp.metrics]
    body = [[axis_text(r.axes[p]) for p in comp.axes] + [str(r.n)] + [boot_text(r.stats[m.key]) for m in comp.metrics] for r in comp.rows]
    return header, body


def delta_cells(comp: Comparison) -> tuple[list[str], list[list[str]]]:
    header = list(comp.axes) + ["pairs"] + [m.key for m in comp.metrics]
    body = []
    for row in comp.rows:
        if row.baseline is None:
            continue
        cells = [axis_text(row.axes[p]) for p in comp.axes]
        cells.append(str(max((d.n_pairs for d in row.deltas.values()), default=0)))
        for m in comp.metrics:
            d = row.deltas.get(m.key)
            if d is None:
                cells.append(DASH)
                continue
            text = (
                delta_text(d, row.baseline.stats[m.key])
                if no_tests_note(comp)
                else f"{delta_text(d, row.baseline.stats[m.key])}, {p_pair_text(d)}"
            )
            cells.append(f"**{text}**" if d.significant else text)
        body.append(cells)
    return header, body


def effect_cells(comp: Comparison, axis: str) -> tuple[list[str], list[list[str]]]:
    header = [axis, "configs"] + [m.key for m in comp.metrics]
    body = [[axis_text(e.level), str(e.configs)] + [fmt(e.means[m.key]) for m in comp.metrics] for e in comp.effects[axis]]
    return header, body


def problem_cells(comp: Comparison, runs: list) -> tuple[list[str], list[list[str]]]:
    header = ["run", "state", "reason"] + list(comp.axes) + ["run id"]
    body = [[r.name, r.state, r.reason or DASH] + [axis_text(r.axes.get(p, "?")) for p in comp.axes] + [r.run_id] for r in runs]
    return header, body


def md_header(comp: Comparison, plots: Sequence[tuple[str, str]]) -> list[str]:
    s = comp.sweep
    lines = [f"# Sweep `{s.name}`: comparison", ""]
    lines += [f"- {ln}" for ln in header_lines(comp)]
    return lines + [f"- store: `{s.uri}`; generated {time.strftime('%Y-%m-%d %H:%M:%S')}"]


def md_configurations(comp: Comparison, plots: Sequence[tuple[str, str]]) -> list[str]:
    n_axes = len(comp.axes)
    lines = ["## Configurations (mean ± std over seeds)", ""]
    h, b = comparison_cells(comp, lambda t: f"**{t}**")
    lines += _md_table(h, b, [False] * (n_axes + 2) + [True] * len(comp.metrics))
    return lines + ["", f"**bold**: {BEST_TEXT[0].lower()}{BEST_TEXT[1:]} n: finished seeds. status: `ok` when every seed finished."]


def md_intervals(comp: Comparison, plots: Sequence[tuple[str, str]]) -> list[str]:
    lines = ["## 95% intervals of the mean (percentile bootstrap over seeds)", ""]
    if not has_intervals(comp):
        return lines + [NO_INTERVALS]
    h, b = ci_cells(comp)
    return lines + _md_table(h, b, [False] * len(comp.axes) + [True] * (1 + len(comp.metrics)))


def md_deltas(comp: Comparison, plots: Sequence[tuple[str, str]]) -> list[str]:
    h, b = delta_cells(comp)
    if not b:
        return []
    lines = [f"## Δ against the baseline ({comp.baseline_text}; other axes equal)", ""]
    lines += _md_table(h, b, [False] * len(comp.axes) + [True] * (1 + len(comp.metrics)))
    note = no_tests_note(comp)
    if note:
        return lines + ["", f"Δ = mean − baseline mean (relative Δ). {note}"]
    return lines + [
        "",
        "Δ = mean − baseline mean (relative Δ); p: two-sided paired t-test over the seeds both finished; Holm: p adjusted "
        f"by Holm's method over the {comp.n_tests} tests of this table (**bold**: significant at 0.05 after it).",
    ]


def md_seeds(comp: Comparison, plots: Sequence[tuple[str, str]]) -> list[str]:
    h, b, _ = seeds_cells(comp)
    if not b or no_tests_note(comp):  # one seed: the Δ section says what the tests need
        return []
    lines = ["## Seeds needed (80% power of the paired t-test to detect the observed Δ)", ""]
    lines += _md_table(h, b, [False] * len(comp.axes) + [True] * (1 + len(comp.metrics)))
    return lines + ["", seeds_legend(comp)]


def md_interactions(comp: Comparison, plots: Sequence[tuple[str, str]]) -> list[str]:
    blocks = []
    for inter in comp.interactions:
        h, b = interaction_cells(comp, inter, mark=" **+**")
        blocks.append([f"## {interaction_title(comp, inter)}", "", *_md_table(h, b, [False, False] + [True] * len(inter.levels))])
    return _joined(blocks + [[interaction_legend(comp, "**+**")]]) if blocks else []


def md_effects(comp: Comparison, plots: Sequence[tuple[str, str]]) -> list[str]:
    blocks = []
    for axis in comp.effects:
        h, b = effect_cells(comp, axis)
        title = f"## Main effect of `{comp.axis_title(axis)}` (mean over the other axes)"
        blocks.append([title, "", *_md_table(h, b, [False, True] + [True] * len(comp.metrics))])
    return _joined(blocks)


def _joined(blocks: list[list[str]]) -> list[str]:
    out: list[str] = []
    for block in blocks:
        out += ([""] if out else []) + block
    return out


def md_problems(comp: Comparison, plots: Sequence[tuple[str, str]]) -> list[str]:
    blocks = []
    if comp.unfinished:
        blocks.append(["## Runs that did not finish", "", *_md_table(*problem_cells(comp, comp.unfinished))])
    if comp.superseded:
        title = "## Superseded runs (another run of the same seed cell counts)"
        blocks.append([title, "", *_md_table(*problem_cells(comp, comp.superseded))])
    note = mixed_note(comp.environments)
    if note:
        body = [[env.label, env.key, str(len(env.runs)), run_list(env.runs)] for env in comp.environments]
        blocks.append(
            ["## Numeric environments", "", note[0].upper() + note[1:] + ".", "", *_md_table(["environment", "key", "runs", "names"], body)]
        )
    return _joined(blocks)


MD_SECTIONS: list[Callable[[Comparison, Sequence[tuple[str, str]]], list[str]]] = [
    md_header,
    md_configurations,
    md_intervals,
    md_deltas,
    md_seeds,
    md_interactions,
    md_effects,
    md_problems,
]
"""The comparison's tables in order, one function each (comparison, plots) -> lines; a section
with nothing to show returns none. The sections after them (the ladder, the plots) are the
neutral ones of `dashboards.sections.SECTIONS`, written by its markdown part writer."""


def markdown(comp: Comparison, plots: Sequence[tuple[str, str]] = ()) -> str:
    """The report as markdown; `plots` are (file name, caption) shown as images beside it."""
    blocks = [lines for section in MD_SECTIONS if (lines := section(comp, plots))]
    blocks += [lines for section in SECTIONS if (lines := writers.markdown(section.title, section.parts(comp, plots)))]
    return "\n\n".join("\n".join(b).strip("\n") for b in blocks).rstrip() + "\n"
