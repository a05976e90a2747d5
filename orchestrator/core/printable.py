"""Untrusted text made safe where it reaches a terminal or a markdown table.

A sweep file is shared like code: its values (an axis value such as `data.separator`, a file
name, a failure reason quoted from an exception) end up in trial names, the console, the
terminal report and report.md. Control characters there are instructions to the terminal (ESC
sequences clear the screen or rewrite lines: a fake "all trials finished"), a right-to-left
override (U+202E) reorders what is shown, and a newline or `|` breaks a markdown row. `terminal`
shows each such character as its escape (`\\x1b`, `\\u202e`, `\\n`), so the value is still readable
and nothing is lost; `markdown_cell` does that and escapes what markdown tables and their HTML
rendering would interpret (`|`, `<`, `>`).
"""

from __future__ import annotations

import unicodedata

UNSAFE = ("Cc", "Cf", "Co", "Cs", "Zl", "Zp")
"""Unicode categories shown as escapes: control, format (bidi overrides, zero-width), private
use, surrogates, line and paragraph separators."""


SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(c: str) -> str:
    if c in SHORT:
        return SHORT[c]
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def terminal(text: object) -> str:
    """`text` as a string with every control, format or separator character shown as its escape."""
    s = str(text)
    if s.isprintable():  # the usual case, checked in C
        return s
    return "".join(_escape(c) if unicodedata.category(c) in UNSAFE else c for c in s)


def markdown_cell(text: object) -> str:
    """`terminal(text)` with `|` escaped and `<`, `>` as entities: one cell of a pipe table."""
    return terminal(text).replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
