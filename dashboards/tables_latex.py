"""The LaTeX tables of a `Comparison` (report.tex), booktabs in the paper's style: the sections of
`dashboards.sections.SECTIONS` that LaTeX shows (the configurations as mean{±std} with the best in
bold and "--" where a metric does not apply, the deltas against the baseline with their p values
set small, the ladder), written by `dashboards.sections.writers.latex` with `tex` escaping."""

from __future__ import annotations

from .comparison import Comparison
from .sections import SECTIONS, writers

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


def latex(comp: Comparison) -> str:
    """Paper-style tables (booktabs): every section of `SECTIONS` LaTeX shows (the
    configurations, the Δ against the baseline, the ladder), each table captioned."""
    s = comp.sweep
    lines = [f"% gatesweep report: sweep {' '.join(s.name.split())}, parent run {s.parent.run_id}; requires \\usepackage{{booktabs}}"]
    for section in SECTIONS:
        text = writers.latex(section.shown("latex", comp, ()), tex, f"Sweep {s.name}: {section.heading(comp)}")
        if text:
            lines += ["", text.rstrip("\n")]
    return "\n".join(lines) + "\n"
