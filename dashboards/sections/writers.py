"""One writer per format for a section's neutral parts (`orchestrator.core.parts`): each takes a
`Section` and its parts and returns the section in that format ("" / [] when it shows nothing
there). The report's renderers (`tables_terminal`, `tables_markdown`, `tables_latex`, `html`)
call them for every section in `dashboards.sections.SECTIONS`.

| part     | terminal                 | markdown                   | LaTeX                 | HTML                     |
|----------|--------------------------|----------------------------|-----------------------|--------------------------|
| `Text`   | its lines                | its lines under the heading | left out (prose)     | one `<p>` a line         |
| `Table`  | aligned columns, legend  | `###` title, pipe table (cells escaped) | a booktabs table     | `<h3>`, a scrolling table |
| `Lines`  | title, indented lines    | `###` title, a list         | `%` comments         | `<h3>`, a list           |
| `Figure` | left out                 | the image and its caption   | left out             | the PNG inlined           |
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from orchestrator.core.parts import Figure, Lines, Part, Table, Text
from orchestrator.core.printable import markdown_cell


def _grid(head: list[str], body: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip(), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in body]
    return lines


def terminal(parts: Sequence[Part]) -> str:
    """The parts for a terminal: each after a blank line, no section heading (the lead says what it is)."""
    lines: list[str] = []
    for part in parts:
        if isinstance(part, Text):
            lines += ["", *part.lines]
        elif isinstance(part, Table):
            lines += ["", part.title, *_grid(part.head, part.rows)]
            if part.legend:
                lines.append(f"  ({part.legend})")
        elif isinstance(part, Lines):
            lines += ["", part.title, *[f"  {x}" for x in part.lines]]
    return "\n".join(lines) + "\n" if lines else ""


def markdown(title: str, parts: Sequence[Part]) -> list[str]:
    """The section under `## title` (none when no part shows in markdown)."""
    lines: list[str] = []
    for part in parts:
        if isinstance(part, Text):
            lines += part.lines
        elif isinstance(part, Figure):
            lines += [f"![{part.caption}]({Path(part.path).name})", "", f"*{part.caption}*", ""]
        elif isinstance(part, Table):
            lines += ["", f"### {part.title}", ""]
            lines += ["| " + " | ".join(markdown_cell(h) for h in part.head) + " |", "|" + "---|" * len(part.head)]
            lines += ["| " + " | ".join(markdown_cell(c) for c in row) + " |" for row in part.rows]
            if part.legend:
                lines += ["", f"*{part.legend}*"]
        else:
            lines += ["", f"### {part.title}", "", *[f"- {x}" for x in part.lines]]
    return [f"## {title}", "", *lines] if lines else []


def latex(parts: Sequence[Part], tex: Callable[[str], str]) -> str:
    """Every table as a booktabs table (`tex` escapes text); the lines as comments."""
    out: list[str] = []
    for part in parts:
        if isinstance(part, Lines):
            out += [f"% {tex(part.title)}: {tex(x)}" for x in part.lines] + [""]
        elif isinstance(part, Table):
            out += [
                "\\begin{table}[t]",
                "\\centering",
                f"\\caption{{{tex(part.title)}}}",
                "\\begin{tabular}{l" + "r" * (len(part.head) - 1) + "}",
                "\\toprule",
                " & ".join(tex(h) for h in part.head) + " \\\\",
                "\\midrule",
                *[" & ".join(tex(c) for c in row) + " \\\\" for row in part.rows],
                "\\bottomrule",
                "\\end{tabular}",
                *([f"\\par\\footnotesize {tex(part.legend)}"] if part.legend else []),
                "\\end{table}",
                "",
            ]
    return "\n".join(out) + "\n" if out else ""


def html(name: str, title: str, parts: Sequence[Part], esc: Callable[[object], str], image: Callable[[Figure], str]) -> list[str]:
    """The section as `<section id=name>` (`esc` escapes text, `image` writes a figure)."""
    out: list[str] = []
    for part in parts:
        if isinstance(part, Text):
            out += [f"<p>{esc(x)}</p>" for x in part.lines]
        elif isinstance(part, Figure):
            out.append(image(part))
        elif isinstance(part, Table):
            out.append(f"<h3>{esc(part.title)}</h3>")
            out.append('<div class="scroll"><table><thead><tr>' + "".join(f"<th>{esc(h)}</th>" for h in part.head) + "</tr></thead><tbody>")
            out += ["<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in part.rows]
            out.append("</tbody></table></div>")
            if part.legend:
                out.append(f'<p class="legend">{esc(part.legend)}</p>')
        else:
            out.append(f"<h3>{esc(part.title)}</h3>")
            out.append("<ul>" + "".join(f"<li>{esc(x)}</li>" for x in part.lines) + "</ul>")
    return [f'<section id="{esc(name)}"><h2>{esc(title)}</h2>', *out, "</section>"] if out else []
