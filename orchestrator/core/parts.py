"""A report's neutral parts: what a section of a report shows, before any format. A section is a
list of parts; one writer per format (`dashboards.sections.writers`: terminal, markdown, LaTeX,
HTML) writes them. The ladder lays its section out in these parts (`orchestrator.ladder.section`),
and so does every section of `gatesweep report` in `dashboards.sections.SECTIONS`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class Table:
    """A table: a title, the column heads, rows of cells (text), a legend under it ("" none)."""

    title: str
    head: list[str]
    rows: list[list[str]]
    legend: str = ""


@dataclass
class Lines:
    """A titled list of lines (one item each)."""

    title: str
    lines: list[str]


@dataclass
class Text:
    """Paragraphs without a title, one a line: a section's lead."""

    lines: list[str]


@dataclass
class Figure:
    """A drawn plot: its PNG and caption (text-only formats leave it out)."""

    path: Path
    caption: str


Part = Table | Lines | Text | Figure
