"""The one figure style every PNG of gatesweep shares (matplotlib, Agg backend: no display
needed): the DPI, the colour cycle, log axes with plain numbers, and `save`, which makes every text
of a figure printable before it is laid out and written.

Every text a figure carries (titles, labels, legends, tick labels, notes) is made printable in
one place (`make_printable`): a value from a shared sweep file with a terminal escape or a bidi
override is drawn as its escape (`\\x1b`), as the console, the plan and report.md show it, and
matplotlib has no glyph to warn about.
"""

from __future__ import annotations

import functools
from pathlib import Path

import matplotlib

from orchestrator.core.printable import terminal

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.text import Text
from matplotlib.ticker import FixedFormatter, FormatStrFormatter, FuncFormatter, LogFormatterSciNotation, NullFormatter

DPI = 100
COLORS = plt.rcParams["axes.prop_cycle"].by_key()["color"]


def color(i: int) -> str:
    return COLORS[i % len(COLORS)]


def _shown(text: str) -> str:
    """`text` with its control and format characters as escapes; its own line breaks kept."""
    return "\n".join(terminal(line) for line in text.split("\n"))


def _shown_by(func, x, pos=None) -> str:
    return _shown(str(func(x, pos)))


def make_printable(fig) -> None:
    """Every text of `fig` made printable (the module's docstring), tick labels' formatters too
    (matplotlib draws those again from the formatter)."""
    for artist in fig.findobj(Text):
        text = artist.get_text()
        if not text.isprintable():
            artist.set_text(_shown(text))
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            fmt = axis.get_major_formatter()
            if isinstance(fmt, FixedFormatter):
                fmt.seq = [_shown(str(s)) for s in fmt.seq]
            elif isinstance(fmt, FuncFormatter):  # what set_xticklabels(labels) makes
                fmt.func = functools.partial(_shown_by, fmt.func)


def save(fig, path: Path) -> Path:
    make_printable(fig)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def log_axes(ax, y: bool = False) -> None:
    """Log x (and y) with plain numbers and no crowded minor labels."""
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(LogFormatterSciNotation())
    ax.xaxis.set_minor_formatter(NullFormatter())
    if y:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FormatStrFormatter("%.3g"))
        ax.yaxis.set_minor_formatter(FormatStrFormatter("%.3g"))
