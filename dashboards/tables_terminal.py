"""The terminal report of a `Comparison`: its header lines, then every section of
`dashboards.sections.SECTIONS` the terminal shows (all but the intervals), written by the
terminal part writer (`dashboards.sections.writers.terminal`): lines wrapped at a width (100
columns by default), wide tables split into blocks of value columns that repeat the key
columns, like a wide data frame."""

from __future__ import annotations

import textwrap

from .cells import header_lines
from .comparison import Comparison
from .sections import SECTIONS, writers


def terminal(comp: Comparison, width: int = 100) -> str:
    """The comparison for a terminal of `width` columns."""
    lines = [x for ln in header_lines(comp) for x in textwrap.wrap(ln, width) or [""]]
    for section in SECTIONS:
        text = writers.terminal(section.shown("terminal", comp, ()), section.heading(comp), width)
        if text:
            lines.append(text.rstrip("\n"))
    return "\n".join(lines) + "\n"
