"""Render a `Comparison` as text: a terminal table, markdown, CSV and LaTeX.

Every format shows the same numbers: per configuration the mean ± std over finished seeds and n,
the 95% confidence interval, the delta against the `none` baseline with its paired-test p value,
the best value per column, the main effect of each axis, and every run that did not finish.

The terminal, markdown and LaTeX (and the HTML, `dashboards.html`) walk the report's sections,
`dashboards.sections.SECTIONS`, once, each section laid out as neutral parts
(`dashboards.sections.tables` for the comparison's tables) and written by the format's part writer
(`dashboards.sections.writers`):

- `terminal`: fits a width (100 columns by default); metric columns that do not fit go to a
  further block that repeats the axis columns, like a wide data frame; best values marked `*`.
- `markdown`: pipe tables padded so that the raw text lines up (MLflow's artifact viewer shows
  the raw file); best values in **bold**.
- `latex`: booktabs tables in the paper's style (mean ± std, best in bold, "--" where absent).
- `csv`: one line per configuration, machine-readable (mean, std, CI bounds, n, delta, p, best);
  a machine format, like report.json (`report_json`): it takes no sections.

Each format lives in its own module (`tables_terminal`, `tables_markdown`, `tables_csv`,
`tables_latex`); this one names them in `RENDERERS` and re-exports them.
"""

from __future__ import annotations

from collections.abc import Callable

from .cells import DASH, axis_headers, ci_text, delta_text, header_lines, mean_std, p_text, status_counts
from .comparison import Comparison
from .tables_csv import csv_text
from .tables_latex import latex
from .tables_markdown import markdown
from .tables_terminal import terminal

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

RENDERERS: dict[str, Callable[[Comparison], str]] = {"table": terminal, "md": markdown, "csv": csv_text, "latex": latex}
