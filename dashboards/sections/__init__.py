"""The report built by sections: each `Section` lays itself out as neutral parts
(`orchestrator.core.parts`: tables, lists of lines, paragraphs, figures) from the comparison and
the drawn plots, and one writer per format (`dashboards.sections.writers`) writes the parts; the
renderers of the report's files (terminal, report.md, report.tex, report.html) walk `SECTIONS`
once, in order, each writing the sections that show in its format (`Section.formats`).

The comparison's tables are `dashboards.sections.tables`; the ladder's section is
`orchestrator.ladder.section`; the plots a report draws are `dashboards.sections.plots`.

Adding a section: a function (comparison, figures) -> parts ([] when it has nothing to show) and
one `Section` entry in `SECTIONS`; every format it names then shows it. report.csv and
report.json are machine formats, one row per configuration, and take no sections."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.core.parts import Figure, Part, Text
from orchestrator.ladder import section as ladder_section
from orchestrator.ladder.section import LadderReport

from ..comparison import Comparison
from . import tables

Figures = Sequence[tuple[Path | str, str]]
"""The drawn plots: (PNG path, or its file name in report.md, caption), in report order."""


FORMATS = frozenset({"terminal", "markdown", "latex", "html"})
"""The formats written from sections."""
NOT_PAPER = FORMATS - {"latex"}
"""Every format but the paper's LaTeX tables (which show the configurations, the Δ and the ladder)."""


@dataclass(frozen=True)
class Section:
    """One section of the report."""

    name: str
    """Its id (the HTML anchor)."""
    title: str
    """Its heading (the terminal, markdown, HTML; LaTeX's caption of a table without a title);
    `{baseline}` in it stands for the comparison's baseline (`heading`)."""
    parts: Callable[[Comparison, Figures], list[Part]]
    """(comparison, figures) -> the parts it shows, in order; [] when it has nothing to show."""
    formats: frozenset[str] = FORMATS
    """The formats that show it."""

    def heading(self, comp: Comparison) -> str:
        """Its title for this comparison."""
        return self.title.replace("{baseline}", comp.baseline_text)

    def shown(self, fmt: str, comp: Comparison, figures: Figures) -> list[Part]:
        """Its parts in format `fmt` ([] when `fmt` does not show it)."""
        return self.parts(comp, figures) if fmt in self.formats else []


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
    Section("configurations", "Configurations (mean ± std over seeds)", tables.configurations),
    Section("ci", "95% intervals of the mean (percentile bootstrap over seeds)", tables.intervals, FORMATS - {"terminal", "latex"}),
    Section("deltas", "Δ against the baseline ({baseline}; other axes equal)", tables.deltas),
    Section("seeds", "Seeds needed (80% power of the paired t-test to detect the observed Δ)", tables.seeds, NOT_PAPER),
    Section("interactions", "Interactions: each arm's Δ at every level of the other axes", tables.interactions, NOT_PAPER),
    Section("effects", "Main effects (each metric averaged over the other axes)", tables.effects, NOT_PAPER),
    Section("unfinished", "Runs that did not finish", tables.unfinished, NOT_PAPER),
    Section("superseded", "Superseded runs (another run of the same seed cell counts)", tables.superseded, NOT_PAPER),
    Section("numerics", "Numeric environments", tables.numerics, NOT_PAPER),
    LADDER,
    Section("plots", "Plots", plot_parts),
]
"""The report's sections in order. The terminal leaves out the intervals (report.md and
report.html have them); LaTeX, the paper's tables, shows the configurations, the Δ and the ladder."""
