"""A report's neutral parts: what a section of a report shows, before any format. A section is a
list of parts; one writer per format (`dashboards.sections.writers`: terminal, markdown, LaTeX,
HTML) writes them. The ladder lays its section out in these parts (`orchestrator.ladder.section`),
and so does every section of `gatesweep report` in `dashboards.sections.SECTIONS`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Cell:
    """A table cell with more than its text (a plain cell is a `str`)."""

    text: str
    spread: str = ""
    """The ± part of a `mean ± spread` cell ("" none): LaTeX sets it small after the mean."""
    detail: str = ""
    """A second line beside the text ("" none), as a Δ's p values: LaTeX sets it small."""
    strong: bool = False
    """Emphasised (a best value, a significant Δ): in bold, or marked `*` on a terminal."""
    note: str = ""
    """More about the cell (HTML: its tooltip; the text formats leave it out)."""


@dataclass
class Table:
    """A table: a title ("" none: the section's heading says it), the column heads, rows of cells,
    a legend under it ("" none).

    With `keys` set, the first `keys` columns name a row (left-aligned) and the others are values
    (right-aligned); a terminal splits a table wider than its width into blocks of value columns,
    each repeating the key columns, like a wide data frame. Without it, a plain grid of text."""

    title: str
    head: list[str]
    rows: list[list[str | Cell]]
    legend: str = ""
    keys: int | None = None
    """How many leading columns name a row (None: a plain grid)."""
    short: list[str] = field(default_factory=list)
    """Shorter heads for a narrow format (the terminal; [] none), explained by `abbrev`."""
    abbrev: str = ""
    """What the `short` heads stand for, under the table where they are used ("" none)."""
    strong: str = ""
    """What an emphasised cell means, after the format's mark (`**bold**: ...`; "" none)."""
    name: str = ""
    """Its id (an HTML anchor, `table-NAME`; "" none)."""


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


def text(cell: str | Cell) -> str:
    """A cell's text: the `Cell`'s own, or the `str`."""
    return cell.text if isinstance(cell, Cell) else cell
