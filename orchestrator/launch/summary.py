"""The end-of-sweep table: one row per trial with the registry's default columns
(`orchestrator.core.metrics.default_columns`, the same as `gatesweep report`'s and
`dashboards.results`'), as the launcher prints it and logs it as `summary.md` on the sweep's
parent run.

Input rows are plain dicts, `{"name", "status", "reason", "metrics"}` (extra keys are ignored,
so `dataclasses.asdict` of the launcher's rows will do). Columns: `trial`, `status`, then the
default metrics some trial logged, in registry order. Numbers print with four
significant digits, a missing value as "-".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from orchestrator.core import metrics as registry
from orchestrator.core.printable import markdown_cell


def summary_columns(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """The metrics that get a column for these rows: the default columns of what they logged."""
    return registry.default_columns(k for r in rows for k in (r.get("metrics") or {}))


def summary_rows(rows: list[Mapping[str, Any]]) -> list[dict]:
    """One dict per trial: `trial`, `status`, then a value (or None) per metric column."""
    cols = summary_columns(rows)
    out = []
    for r in rows:
        values = r.get("metrics") or {}
        out.append({"trial": r["name"], "status": r["status"], **{c: values.get(c) for c in cols}})
    return out


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else markdown_cell(value)


def summary_markdown(name: str, rows: list[Mapping[str, Any]]) -> str:
    """The sweep's summary as Markdown: the table, then a note per trial that has a reason."""
    table = summary_rows(rows)
    if not table:
        return f"# {name}\n\nno trials\n"
    cols = list(table[0])
    lines = [f"# sweep {name}", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_cell(row[c]) for c in cols) + " |" for row in table]
    reasons = [f"- {markdown_cell(r['name'])}: {markdown_cell(r['reason'])}" for r in rows if r.get("reason")]
    if reasons:
        lines += ["", "## notes", *reasons]
    return "\n".join(lines) + "\n"
