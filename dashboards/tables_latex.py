"""The LaTeX tables of a `Comparison`, booktabs in the paper's style: mean ± std with the best in
bold and "--" where a metric does not apply, then the deltas against the baseline with p values."""

from __future__ import annotations

from .cells import axis_headers, delta_text, p_text
from .comparison import Comparison
from .metrics import axis_text, decimals, fmt
from .sections import SECTIONS, writers
from .seedstats import Stat

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
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "|": r"\textbar{}",
    "–": "--",
    "−": "-",
    "±": r"$\pm$",
    "Δ": r"$\Delta$",
    "α": r"$\alpha$",
    "≤": r"$\leq$",
    "≥": r"$\geq$",
    "·": r"$\cdot$",
}


def tex(text: str) -> str:
    """Text for LaTeX's default (OT1) fonts: its special characters escaped, `<` and `>` (which
    OT1 prints as ¡ and ¿) and the report's few non-ASCII signs spelled as commands."""
    return "".join(_TEX.get(c, c) for c in str(text))


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
    lines = [f"% gatesweep report: sweep {' '.join(s.name.split())}, parent run {s.parent.run_id}; requires \\usepackage{{booktabs}}"]
    lines += _tex_table(
        tex(
            f"Sweep {s.name}: mean ± std over seeds; best in bold where significantly better after Holm; -- where a metric does not apply."
        ),
        header,
        body,
        len(comp.axes),
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
                    + (rf" {{\scriptsize($p$={tex(p_text(d.p))}, Holm {tex(p_text(d.p_holm))})}}" if d.p is not None else "")
                )
            body.append(cells)
        lines += [""] + _tex_table(
            tex(
                f"Sweep {s.name}: Δ against the baseline ({comp.baseline_text}); p: paired t-test over seeds, Holm: adjusted over the "
                f"{comp.n_tests} tests."
            ),
            header,
            body,
            len(comp.axes),
        )
    for section in SECTIONS:
        text = writers.latex(section.parts(comp, ()), tex)
        if text:
            lines += ["", text]
    return "\n".join(lines) + "\n"
