"""One writer per format for a section's neutral parts (`orchestrator.core.parts`): each takes a
section's title and parts and returns the section in that format ("" / [] when it shows nothing
there). The report's renderers (`tables_terminal`, `tables_markdown`, `tables_latex`, `html`)
call them for every section in `dashboards.sections.SECTIONS` that shows in their format.

| part     | terminal                 | markdown                   | LaTeX                 | HTML                     |
|----------|--------------------------|----------------------------|-----------------------|--------------------------|
| `Text`   | its lines                | its lines under the heading | left out (prose)     | one `<p>` a line         |
| `Table`  | aligned columns, legend  | `###` title, pipe table (cells escaped) | a booktabs table     | `<h3>`, a scrolling table |
| `Lines`  | title, indented lines    | `###` title, a list         | `%` comments         | `<h3>`, a list           |
| `Figure` | left out                 | the image and its caption   | left out             | the PNG inlined           |

A table with key columns (`Table.keys`) has its value columns right-aligned; the terminal fits it
to its width in blocks that repeat the key columns, and uses the short heads (`Table.short`) with
what they stand for under it; markdown pads it so that the raw text lines up (MLflow's artifact
viewer shows the raw file). An emphasised cell (`Cell.strong`) is marked `*` on a terminal, in
bold elsewhere, and the legend says what the mark means (`Table.strong`). A `Cell.note` is the
HTML cell's tooltip.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

from orchestrator.core.parts import Cell, Figure, Lines, Part, Table, Text
from orchestrator.core.printable import markdown_cell
from orchestrator.core.printable import terminal as printable

MARKS = {"terminal": "*", "markdown": "**bold**", "latex": "bold", "html": "highlighted"}
"""How each format marks an emphasised cell, as its legend names the mark."""


def _cell(cell: str | Cell) -> Cell:
    return cell if isinstance(cell, Cell) else Cell(cell)


def _legend(table: Table, fmt: str) -> str:
    """The text under a table: what its mark means, then its legend."""
    mark = f"{MARKS[fmt]}: {table.strong}" if table.strong else ""
    return " ".join(x for x in (mark, table.legend) if x)


# ---- terminal -----------------------------------------------------------------------------------


def _grid(head: list[str], body: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip(), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in body]
    return lines


def _blocks(table: list[list[str]], keys: int, width: int | None, gap: int = 2) -> list[list[int]]:
    """The value columns' indices in blocks that fit beside the key columns."""
    widths = [max(len(r[i]) for r in table) + gap for i in range(len(table[0]))]
    fixed = sum(widths[:keys])
    blocks: list[list[int]] = [[]]
    used = fixed
    for j in range(keys, len(widths)):
        if blocks[-1] and width is not None and used + widths[j] > width:
            blocks.append([])
            used = fixed
        blocks[-1].append(j)
        used += widths[j]
    return blocks


def _wrap_columns(table: list[list[str]], rooms: dict[int, int]) -> list[list[str]]:
    """Each cell of the columns in `rooms` wrapped to its room, onto further lines of its row (the
    other cells blank there)."""
    if not rooms:
        return table
    out = [table[0]]
    for r in table[1:]:
        pieces = {j: textwrap.wrap(r[j], room) or [""] for j, room in rooms.items()}
        for k in range(max(len(p) for p in pieces.values())):
            out.append([(pieces[j][k] if k < len(pieces[j]) else "") if j in pieces else (c if k == 0 else "") for j, c in enumerate(r)])
    return out


def _wrapped(table: list[list[str]], keys: int, width: int | None) -> list[list[str]]:
    """The table fitted to `width` where blocks cannot fit it: key columns too wide to leave a
    value column room have their widest one wrapped, then each value too wide to fit beside the
    key columns is wrapped (onto further lines of its row)."""
    if width is None:
        return table
    widths = [max(len(r[j]) for r in table) + 2 for j in range(len(table[0]))]
    reserve = min(max(widths[keys:]), width // 2) if keys < len(widths) else 0
    over = sum(widths[:keys]) - 2 + reserve - width
    rooms: dict[int, int] = {}
    if keys and over > 0:
        widest = max(range(keys), key=lambda j: widths[j])
        rooms[widest] = max(widths[widest] - 2 - over, 12)
        widths[widest] = rooms[widest] + 2
    room = max(width - sum(widths[:keys]), 12)
    rooms |= {j: room for j in range(keys, len(widths)) if widths[j] - 2 > room}
    return _wrap_columns(table, rooms)


def term_cell(cell: str | Cell) -> str:
    """A cell on a terminal: `mean±std`, `Δ, p …`, `*` when emphasised, control characters escaped."""
    c = _cell(cell)
    text = c.text + (f"±{c.spread}" if c.spread else "") + (f", {c.detail}" if c.detail else "") + ("*" if c.strong else "")
    return printable(text)  # no terminal control characters from the store


def term_table(head: list[str], rows: Sequence[Sequence[str | Cell]], keys: int, width: int | None) -> list[str]:
    """Rows of cells -> text lines, the columns after `keys` right-aligned and split into blocks
    that fit `width` (None: one block), each block repeating the key columns; a value too wide
    for any block wraps onto further lines of its row."""
    if not rows:
        return []
    table = _wrapped([[printable(h) for h in head]] + [[term_cell(c) for c in r] for r in rows], keys, width)
    out: list[str] = []
    for b, block in enumerate(_blocks(table, keys, width)):
        cols = list(range(keys)) + block
        widths = [max(len(r[j]) for r in table) for j in cols]
        if b:
            out.append("")
        for i, r in enumerate(table):
            if i and not any(r[j] for j in cols):
                continue  # a row's further line that has nothing in this block
            cells = [r[j].rjust(w) if j >= keys else r[j].ljust(w) for j, w in zip(cols, widths)]
            out.append("  ".join(cells).rstrip())
            if i == 0:
                out.append("  ".join("-" * w for w in widths))
    return out


def _wrap(text: str, width: int | None) -> list[str]:
    return [text] if width is None else textwrap.wrap(text, width) or [""]


def _wrap_item(text: str, width: int | None) -> list[str]:
    """One item of a list, indented 2 and its continuation lines 4; words (a path, a run name) unbroken."""
    if width is None:
        return [f"  {text}"]
    kw = {"break_long_words": False, "break_on_hyphens": False}
    return textwrap.wrap(text, width, initial_indent="  ", subsequent_indent="    ", **kw) or [""]


def _term_part(part: Part, width: int | None) -> list[str]:
    if isinstance(part, Text):
        return [x for line in part.lines for x in _wrap(line, width)]
    if isinstance(part, Lines):
        return [part.title, *[x for line in part.lines for x in _wrap_item(line, width)]]
    if not isinstance(part, Table):
        return []
    lines = _wrap(part.title, width) if part.title else []
    if part.keys is None:
        lines += _grid(part.head, [[_cell(c).text for c in r] for r in part.rows])
        return lines + ([f"  ({part.legend})"] if part.legend else [])
    head = part.short or part.head
    lines += term_table(head, part.rows, part.keys, width)
    for text in (_legend(part, "terminal"), part.abbrev if part.short else ""):
        lines += _wrap(text, width) if text else []
    return lines


def terminal(parts: Sequence[Part], title: str = "", width: int | None = None) -> str:
    """The parts for a terminal, each after a blank line, under `title` when one is given; lines
    wrapped at `width` (None: as they are)."""
    lines: list[str] = []
    for part in parts:
        shown = _term_part(part, width)
        lines += ["", *shown] if shown else []
    if lines and title:
        lines = ["", *_wrap(title, width), *lines]
    return "\n".join(lines) + "\n" if lines else ""


# ---- markdown -----------------------------------------------------------------------------------


def md_cell(cell: str | Cell) -> str:
    """A cell of a pipe table: escaped, `mean ± std`, `Δ, p …`, in bold when emphasised."""
    c = _cell(cell)
    text = markdown_cell(c.text + (f" ± {c.spread}" if c.spread else "") + (f", {c.detail}" if c.detail else ""))
    return f"**{text}**" if c.strong else text


def md_table(head: list[str], rows: Sequence[Sequence[str | Cell]], keys: int) -> list[str]:
    """A pipe table whose raw text lines up, the columns after `keys` right-aligned."""
    esc = [[markdown_cell(h) for h in head]] + [[md_cell(c) for c in r] for r in rows]
    widths = [max(3, *(len(r[i]) for r in esc)) for i in range(len(head))]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(esc[0], widths)) + " |",
        "|" + "|".join(("-" * (w + 1) + ":") if i >= keys else ("-" * (w + 2)) for i, w in enumerate(widths)) + "|",
    ]
    for r in esc[1:]:
        lines.append("| " + " | ".join(c.rjust(w) if i >= keys else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))) + " |")
    return lines


def _md_part(part: Part) -> list[str]:
    if isinstance(part, Text):
        return part.lines
    if isinstance(part, Figure):
        return [f"![{part.caption}]({Path(part.path).name})", "", f"*{part.caption}*", ""]
    if isinstance(part, Lines):
        return ["", f"### {part.title}", "", *[f"- {x}" for x in part.lines]]
    assert isinstance(part, Table)
    lines = ["", f"### {part.title}", ""] if part.title else [""]
    if part.keys is None:
        lines += ["| " + " | ".join(markdown_cell(h) for h in part.head) + " |", "|" + "---|" * len(part.head)]
        lines += ["| " + " | ".join(markdown_cell(_cell(c).text) for c in row) + " |" for row in part.rows]
        return lines + (["", f"*{part.legend}*"] if part.legend else [])
    lines += md_table(part.head, part.rows, part.keys)
    legend = _legend(part, "markdown")
    return lines + (["", legend] if legend else [])


def markdown(title: str, parts: Sequence[Part]) -> list[str]:
    """The section under `## title` (none when no part shows in markdown)."""
    lines = [x for part in parts for x in _md_part(part)]
    if not lines:
        return []
    return [f"## {title}", *([] if lines[0] == "" else [""]), *lines]


# ---- LaTeX --------------------------------------------------------------------------------------


def _tex_cell(cell: str | Cell, tex: Callable[[str], str]) -> str:
    c = _cell(cell)
    text = rf"\textbf{{{tex(c.text)}}}" if c.strong else tex(c.text)
    text += rf"{{\scriptsize$\pm${tex(c.spread)}}}" if c.spread else ""
    return text + (rf" {{\scriptsize({tex(c.detail)})}}" if c.detail else "")


def _tex_table(part: Table, caption: str, tex: Callable[[str], str]) -> list[str]:
    keys = 1 if part.keys is None else part.keys
    legend = _legend(part, "latex")
    return [
        "\\begin{table}[t]",
        "\\centering",
        f"\\caption{{{tex(caption)}}}",
        "\\begin{tabular}{" + "l" * keys + "r" * (len(part.head) - keys) + "}",
        "\\toprule",
        " & ".join(tex(h) for h in part.head) + " \\\\",
        "\\midrule",
        *[" & ".join(_tex_cell(c, tex) for c in row) + " \\\\" for row in part.rows],
        "\\bottomrule",
        "\\end{tabular}",
        *([f"\\par\\footnotesize {tex(legend)}"] if legend else []),
        "\\end{table}",
        "",
    ]


def latex(parts: Sequence[Part], tex: Callable[[str], str], title: str = "") -> str:
    """Every table as a booktabs table (`tex` escapes text; a table without a title takes the
    section's as its caption); the lines as comments."""
    out: list[str] = []
    for part in parts:
        if isinstance(part, Lines):
            out += [f"% {tex(part.title)}: {tex(x)}" for x in part.lines] + [""]
        elif isinstance(part, Table):
            out += _tex_table(part, part.title or title, tex)
    return "\n".join(out) + "\n" if out else ""


# ---- HTML ---------------------------------------------------------------------------------------


def _td(cell: str | Cell, value: bool, esc: Callable[[object], str]) -> str:
    c = _cell(cell)
    cls = " ".join(x for x in ("num" if value else "", "best" if c.strong else "") if x)
    text = esc(c.text + (f" ± {c.spread}" if c.spread else ""))
    text = f"<strong>{text}</strong>" if c.strong else text
    text += f"<br>{esc(c.detail)}" if c.detail else ""
    return "<td" + (f' class="{cls}"' if cls else "") + (f' title="{esc(c.note)}"' if c.note else "") + f">{text}</td>"


def _html_table(part: Table, esc: Callable[[object], str]) -> list[str]:
    keys = len(part.head) if part.keys is None else part.keys
    out = [f"<h3>{esc(part.title)}</h3>"] if part.title else []
    table_id = f' id="table-{esc(part.name)}"' if part.name else ""
    out.append(
        f'<div class="wrap"><table{table_id}><thead><tr>' + "".join(f"<th>{esc(h)}</th>" for h in part.head) + "</tr></thead><tbody>"
    )
    out += ["<tr>" + "".join(_td(c, j >= keys, esc) for j, c in enumerate(row)) + "</tr>" for row in part.rows]
    out.append("</tbody></table></div>")
    legend = _legend(part, "html")
    if any(isinstance(c, Cell) and c.note for row in part.rows for c in row):
        legend += (" " if legend else "") + "Hover a cell for more."
    return out + ([f'<p class="legend">{esc(legend)}</p>'] if legend else [])


def html(name: str, title: str, parts: Sequence[Part], esc: Callable[[object], str], image: Callable[[Figure], str]) -> list[str]:
    """The section as `<section id=name>` (`esc` escapes text, `image` writes a figure)."""
    out: list[str] = []
    for part in parts:
        if isinstance(part, Text):
            out += [f"<p>{esc(x)}</p>" for x in part.lines]
        elif isinstance(part, Figure):
            out.append(image(part))
        elif isinstance(part, Table):
            out += _html_table(part, esc)
        else:
            out.append(f"<h3>{esc(part.title)}</h3>")
            out.append("<ul>" + "".join(f"<li>{esc(x)}</li>" for x in part.lines) + "</ul>")
    return [f'<section id="{esc(name)}"><h2>{esc(title)}</h2>', *out, "</section>"] if out else []
