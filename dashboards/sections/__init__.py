"""The report built by sections: each `Section` lays itself out as neutral parts
(`orchestrator.core.parts`: tables, lists of lines, paragraphs, figures) from the comparison and
the drawn plots, and one writer per format (`dashboards.sections.writers`) writes the parts; the
renderers of the report's files walk `SECTIONS` in order.

Adding a section: a function (comparison, figures) -> parts ([] when it has nothing to show) and
one `Section` entry in `SECTIONS`; every format (terminal, report.md, report.tex, report.html)
then shows it. The plots a report draws are `dashboards.sections.plots`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.core.parts import Figure, Part, Text
from orchestrator.ladder import section as ladder_section
from orchestrator.ladder.section import LadderReport

from ..comparison import Comparison

Figures = Sequence[tuple[Path | str, str]]
"""The drawn plots: (PNG path, or its file name in report.md, caption), in report order."""


@dataclass(frozen=True)
class Section:
    """One section of the report."""

    name: str
    """Its id (the HTML anchor)."""
    title: str
    """Its heading (markdown, HTML)."""
    parts: Callable[[Comparison, Figures], list[Part]]
    """(comparison, figures) -> the parts it shows, in order; [] when it has nothing to show."""


def ladder_report_parts(rep: LadderReport) -> list[Part]:
    """A ladder's section: its lead, then its fits, multipliers, verdicts and sink trends
    (`orchestrator.ladder.section`)."""
    return [Text(ladder_section.header_lines(rep)), *ladder_section.parts(rep)]


def ladder_parts(comp: Comparison, figures: Figures) -> list[Part]:
    """A ladder sweep's section ([] for any other sweep)."""
    return ladder_report_parts(comp.ladder) if comp.ladder is not None else []


def plot_parts(comp: Comparison, figures: Figures) -> list[Part]:
    """The drawn plots with their captions (`dashboards.sections.plots`)."""
    return [Figure(Path(path), caption) for path, caption in figures]


LADDER = Section("ladder", "Scaling ladder", ladder_parts)
SECTIONS: list[Section] = [
    LADDER,
    Section("plots", "Plots", plot_parts),
]
"""The report's sections written by the part writers, in order, after the comparison's tables
(configurations, intervals, Δ tests, seeds needed, interactions, main effects, problems, numeric
environments), which each format still writes itself (`tables_*`, `html`)."""
