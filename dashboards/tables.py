"""Render a `Comparison` as text: a terminal table, markdown, CSV and LaTeX.

Every format shows the same numbers: per configuration the mean ± std over finished seeds and n,
the 95% confidence interval, the delta against the `none` baseline with its paired-test p value,
the best value per column, the main effect of each axis, and every run that did not finish.

- `terminal`: fits a width (100 columns by default); metric columns that do not fit go to a
  further block that repeats the axis columns, like a wide data frame.
- `markdown`: pipe tables padded so that the raw text lines up (MLflow's artifact viewer shows
  the raw file); best values in **bold**.
- `csv`: one line per configuration, machine-readable (mean, std, CI bounds, n, delta, p, best).
- `latex`: booktabs tables in the paper's style (mean ± std, best in bold, "--" where absent).
"""

from __future__ import annotations

import csv
import io
import time
from collections.abc import Callable, Sequence

from .cells import DASH, axis_headers, ci_text, delta_text, header_lines, mean_std, p_text, status_counts
from .metrics import axis_text, decimals, fmt
from .stats import Comparison, Stat

__all__ = [
    "DASH",
    "RENDERERS",
    "axis_headers",
    "ci_text",
    "csv_text",
    "delta_text",
    "header_lines",
    "latex",
    "markdown",
    "mean_std",
    "p_text",
    "status_counts",
    "terminal",
]


# ---- shared pieces -------------------------------------------------------------------------
def _align(cells: list[list[str]], right: Sequence[bool]) -> list[list[str]]:
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    return [[c.rjust(w) if right[i] else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))] for r in cells]


# ---- terminal -------------------------------------------------------------------------------
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
    table = [header] + body
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
    import textwrap

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
    lines.append("* best per column; ± std over seeds. 95% CIs: report.md / report.html.")

    drows = [r for r in comp.rows if r.baseline is not None]
    if drows:
        lines += ["", "Δ vs gate none (same other axes); p: paired t-test over matching seeds"]
        header = [heads[p] for p in comp.axes] + ["pairs"] + [m.label for m in comp.metrics]
        body = []
        for row in drows:
            cells = [axis_text(row.axes[p]) for p in comp.axes]
            pairs = max((d.n_pairs for d in row.deltas.values()), default=0)
            cells.append(str(pairs))
            for m in comp.metrics:
                d = row.deltas.get(m.key)
                cells.append(DASH if d is None else f"{delta_text(d, row.baseline.stats[m.key], relative=False)} p={p_text(d.p)}")
            body.append(cells)
        lines += _terminal_grid(header, body, len(comp.axes) + 1, width)

    for axis, effects in comp.effects.items():
        lines += ["", f"main effect of {comp.axis_title(axis)} (mean over the other axes)"]
        header = [heads[axis], "configs"] + [m.label for m in comp.metrics]
        body = [[axis_text(e.level), str(e.configs)] + [fmt(e.means[m.key]) for m in comp.metrics] for e in effects]
        lines += _terminal_grid(header, body, 2, width)

    lines += _problem_lines(comp, width)
    return "\n".join(lines) + "\n"


def _problem_lines(comp: Comparison, width: int) -> list[str]:
    import textwrap

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
    return out


# ---- markdown -------------------------------------------------------------------------------
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
    body = [[axis_text(r.axes[p]) for p in comp.axes] + [str(r.n)] + [ci_text(r.stats[m.key]) for m in comp.metrics] for r in comp.rows]
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
            cells.append(DASH if d is None else f"{delta_text(d, row.baseline.stats[m.key])}, p {p_text(d.p)}")
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
    lines += ["## 95% confidence intervals of the mean (Student's t)", ""]
    h, b = ci_cells(comp)
    lines += _md_table(h, b, [False] * n_axes + [True] * (1 + len(comp.metrics)))
    h, b = delta_cells(comp)
    if b:
        lines += ["", "## Δ against the baseline (gate `none`, other axes equal)", ""]
        lines += _md_table(h, b, [False] * n_axes + [True] * (1 + len(comp.metrics)))
        lines += ["", "Δ = mean − baseline mean (relative Δ); p: two-sided paired t-test over the seeds both finished."]
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
    if plots:
        lines += ["", "## Plots", ""]
        for name, caption in plots:
            lines += [f"![{caption}]({name})", "", f"*{caption}*", ""]
    return "\n".join(lines).rstrip() + "\n"


# ---- csv ------------------------------------------------------------------------------------
def csv_text(comp: Comparison) -> str:
    """One line per configuration; per metric: mean, std, ci95_lo, ci95_hi, n, delta, delta_rel_pct, p, best."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    fields = ("mean", "std", "ci95_lo", "ci95_hi", "n", "delta", "delta_rel_pct", "p", "best")
    w.writerow(list(comp.axes) + ["n_finished", "status", "run_ids"] + [f"{m.key}.{f}" for m in comp.metrics for f in fields])

    def num(x: float | None) -> str:
        return "" if x is None else repr(float(x))

    for row in comp.rows:
        cells = [row.axes[p] for p in comp.axes] + [row.n, row.status, " ".join(r.run_id for r in row.live_runs())]
        for m in comp.metrics:
            st, d = row.stats[m.key], row.deltas.get(m.key)
            cells += [
                num(st.mean),
                num(st.std),
                num(st.lo),
                num(st.hi),
                st.n,
                num(d.diff if d else None),
                num(d.rel if d else None),
                num(d.p if d else None),
                int(m.key in row.best),
            ]
        w.writerow(cells)
    return buf.getvalue()


# ---- latex ----------------------------------------------------------------------------------
_TEX = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "–": "--",
    "±": r"$\pm$",
    "Δ": r"$\Delta$",
}


def tex(text: str) -> str:
    return "".join(_TEX.get(c, c) for c in text)


def _tex_stat(stat: Stat, best: bool) -> str:
    if stat.mean is None:
        return "--"
    d = decimals(stat.mean)
    text = fmt(stat.mean, d, thousands=False)
    text = rf"\textbf{{{text}}}" if best else text
    if stat.std is not None:
        text += rf"{{\scriptsize$\pm${fmt(stat.std, d, thousands=False)}}}"
    return text


def _tex_table(caption: str, header: list[str], body: list[list[str]], n_left: int) -> list[str]:
    spec = "l" * n_left + "r" * (len(header) - n_left)
    return [
        r"\begin{table}[t]",
        r"\centering",
        r"\small",
        rf"\begin{{tabular}}{{{spec}}}",
        r"\toprule",
        " & ".join(header) + r" \\",
        r"\midrule",
        *[" & ".join(r) + r" \\" for r in body],
        r"\bottomrule",
        r"\end{tabular}",
        rf"\caption{{{caption}}}",
        r"\end{table}",
    ]


def latex(comp: Comparison) -> str:
    """Paper-style tables (booktabs): the comparison, then Δ against the baseline."""
    heads = axis_headers(comp.axes)
    s = comp.sweep
    header = [tex(heads[p]) for p in comp.axes] + ["$n$"] + [tex(m.key) for m in comp.metrics]
    body = []
    for row in comp.rows:
        cells = [tex(axis_text(row.axes[p])) for p in comp.axes] + [str(row.n) if row.status == "ok" else f"{row.n} ({tex(row.status)})"]
        cells += [_tex_stat(row.stats[m.key], m.key in row.best) for m in comp.metrics]
        body.append(cells)
    lines = [f"% gatesweep report: sweep {s.name}, parent run {s.parent.run_id}; requires \\usepackage{{booktabs}}"]
    lines += _tex_table(
        tex(f"Sweep {s.name}: mean ± std over seeds; best in bold; -- where a metric does not apply."), header, body, len(comp.axes)
    )
    drows = [r for r in comp.rows if r.baseline is not None]
    if drows:
        header = [tex(heads[p]) for p in comp.axes] + [tex(m.key) for m in comp.metrics]
        body = []
        for row in drows:
            cells = [tex(axis_text(row.axes[p])) for p in comp.axes]
            for m in comp.metrics:
                d = row.deltas.get(m.key)
                cells.append(
                    "--"
                    if d is None
                    else tex(delta_text(d, row.baseline.stats[m.key], relative=False))
                    + (rf" {{\scriptsize($p$={p_text(d.p)})}}" if d.p is not None else "")
                )
            body.append(cells)
        lines += [""] + _tex_table(
            tex(f"Sweep {s.name}: Δ against the gate-none baseline; p: paired t-test over seeds."), header, body, len(comp.axes)
        )
    return "\n".join(lines) + "\n"


RENDERERS: dict[str, Callable[[Comparison], str]] = {"table": terminal, "md": markdown, "csv": csv_text, "latex": latex}
__all__ = ["RENDERERS", "axis_headers", "csv_text", "latex", "markdown", "terminal"]
