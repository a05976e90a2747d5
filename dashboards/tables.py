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
