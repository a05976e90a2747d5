"""The markdown report of a `Comparison` (report.md): a title and the header lines, then every
section of `dashboards.sections.SECTIONS` under its `##` heading, written by the markdown part
writer (`dashboards.sections.writers.markdown`): pipe tables padded so that the raw text lines up
(MLflow's artifact viewer shows the raw file), best values and significant Δ in **bold**, the
plots as images beside the file."""

from __future__ import annotations

import time
from collections.abc import Sequence

from .cells import header_lines
from .comparison import Comparison
from .sections import SECTIONS, writers


def md_header(comp: Comparison) -> list[str]:
    """The title, the header lines and where the report came from."""
    s = comp.sweep
    lines = [f"# Sweep `{s.name}`: comparison", ""]
    lines += [f"- {ln}" for ln in header_lines(comp)]
    return lines + [f"- store: `{s.uri}`; generated {time.strftime('%Y-%m-%d %H:%M:%S')}"]


def markdown(comp: Comparison, plots: Sequence[tuple[str, str]] = ()) -> str:
    """The report as markdown; `plots` are (file name, caption) shown as images beside it."""
    blocks = [md_header(comp)]
    for section in SECTIONS:
        lines = writers.markdown(section.heading(comp), section.shown("markdown", comp, plots))
        if lines:
            blocks.append(lines)
    return "\n\n".join("\n".join(b).strip("\n") for b in blocks).rstrip() + "\n"
