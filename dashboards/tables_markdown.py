"""The markdown report of a `Comparison`: pipe tables padded so that the raw text lines up
(MLflow's artifact viewer shows the raw file), best values in **bold**, and the cells of each
table (`comparison_cells`, `ci_cells`, `delta_cells`, `effect_cells`, `problem_cells`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from .cells import DASH, boot_text, delta_text, header_lines, mean_std, p_pair_text, seeds_lines
from .comparison import Comparison
from .metrics import axis_text, fmt


def _md_table(header: list[str], body: list[list[str]], right: Sequence[bool] | None = None) -> list[str]:
    """A pipe table whose raw text lines up."""
    esc = [[c.replace("|", "\\|") for c in r] for r in [header] + body]
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
            text = f"{delta_text(d, row.baseline.stats[m.key])}, {p_pair_text(d)}"
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


def markdown(comp: Comparison, plots: Sequence[tuple[str, str]] = ()) -> str:
    """The report as markdown; `plots` are (file name, caption) shown as images beside it."""
    s = comp.sweep
    n_axes = len(comp.axes)
    lines = [f"# Sweep `{s.name}`: comparison", ""]
    lines += [f"- {ln}" for ln in header_lines(comp)]
    lines += [f"- store: `{s.uri}`; generated {time.strftime('%Y-%m-%d %H:%M:%S')}", ""]
    lines += ["## Configurations (mean ± std over seeds)", ""]
    h, b = comparison_cells(comp, lambda t: f"**{t}**")
    lines += _md_table(h, b, [False] * (n_axes + 2) + [True] * len(comp.metrics))
    lines += ["", "**bold**: best per column. n: finished seeds. status: `ok` when every seed finished.", ""]
    lines += ["## 95% intervals of the mean (percentile bootstrap over seeds)", ""]
    h, b = ci_cells(comp)
    lines += _md_table(h, b, [False] * n_axes + [True] * (1 + len(comp.metrics)))
    h, b = delta_cells(comp)
    if b:
        lines += ["", f"## Δ against the baseline ({comp.baseline_text}; other axes equal)", ""]
        lines += _md_table(h, b, [False] * n_axes + [True] * (1 + len(comp.metrics)))
        lines += [
            "",
            "Δ = mean − baseline mean (relative Δ); p: two-sided paired t-test over the seeds both finished; Holm: p adjusted "
            f"by Holm's method over the {comp.n_tests} tests of this table (**bold**: significant at 0.05 after it).",
        ]
        lines += ["", "## Seeds needed (power of the paired t-test to detect the observed Δ at α 0.05)", ""]
        lines += [f"- {ln}" for ln in seeds_lines(comp)]
    for axis in comp.effects:
        lines += ["", f"## Main effect of `{comp.axis_title(axis)}` (mean over the other axes)", ""]
        h, b = effect_cells(comp, axis)
        lines += _md_table(h, b, [False, True] + [True] * len(comp.metrics))
    if comp.unfinished:
        lines += ["", "## Runs that did not finish", ""]
        lines += _md_table(*problem_cells(comp, comp.unfinished))
    if comp.superseded:
        lines += ["", "## Superseded runs (another run of the same seed cell counts)", ""]
        lines += _md_table(*problem_cells(comp, comp.superseded))
    if comp.ladder is not None:
        from .ladder_tables import ladder_markdown

        lines += ladder_markdown(comp.ladder).splitlines()
    if plots:
        lines += ["", "## Plots", ""]
        for name, caption in plots:
            lines += [f"![{caption}]({name})", "", f"*{caption}*", ""]
    return "\n".join(lines).rstrip() + "\n"
