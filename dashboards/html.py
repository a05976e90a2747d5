"""The HTML report: ONE self-contained file that opens anywhere with no network.

CSS is inline, every plot is inlined as a base64 `data:image/png` URI, and there is no script at
all, so the file can be mailed, archived, or shown by MLflow's artifact viewer (which renders
HTML artifacts in a sandboxed frame). Its sections are those of `dashboards.sections.SECTIONS`,
written by `dashboards.sections.writers.html`: mean ± std with both 95% intervals in each cell's
tooltip and the bootstrap one in its own table, deltas with paired-test p values (raw and
Holm-adjusted), the seeds needed per comparison, each arm's Δ at every level of the other axes,
main effects, every run that did not finish, the ladder and the plots. Wide tables scroll
sideways inside the page with their first column frozen.
"""

from __future__ import annotations

import base64
import html
import struct
import time
from collections.abc import Sequence
from pathlib import Path

from orchestrator.core.parts import Figure

from .cells import header_lines, status_counts
from .comparison import Comparison
from .sections import SECTIONS, writers

Plots = Sequence[tuple[Path, str]]
"""(PNG path, caption) of each plot, in report order."""

CSS = """
body{font-family:-apple-system,"Segoe UI",Roboto,"DejaVu Sans",Arial,sans-serif;margin:24px auto;max-width:1400px;
     padding:0 16px;color:#1d2330;background:#fff;line-height:1.4}
h1{font-size:22px;margin:0 0 6px} h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #dde2ea;padding-bottom:4px}
.meta{color:#4a5568;font-size:13px;margin:2px 0}
.wrap{overflow-x:auto;max-width:100%}
table{border-collapse:separate;border-spacing:0;font-size:13px;margin:4px 0 8px}
th,td{border:1px solid #d5dbe5;border-width:0 1px 1px 0;padding:4px 8px;white-space:nowrap;background:#fff}
tr>:first-child{border-left-width:1px} thead tr>*{border-top-width:1px}
th{background:#eef2f7;text-align:left;font-weight:600}
th:first-child,td:first-child{position:sticky;left:0;z-index:1;box-shadow:1px 0 0 #c3cbd8}
td.num{text-align:right;font-variant-numeric:tabular-nums}
tbody tr td.best{background:#e3f4e5;font-weight:700}
.legend{color:#4a5568;font-size:12px;margin:2px 0 10px}
figure{display:inline-block;margin:8px 16px 16px 0;vertical-align:top}
figure img{display:block;max-width:100%;height:auto;border:1px solid #e2e8f0}
figcaption{font-size:12px;color:#4a5568;max-width:720px;margin-top:4px}
h3{font-size:15px;margin:18px 0 6px}
footer{margin-top:32px;font-size:11px;color:#718096}
"""


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def png_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a PNG header."""
    if data[:8] != b"\x89PNG\r\n\x1a\n" or len(data) < 24:
        return None
    return struct.unpack(">II", data[16:24])


def data_uri(path: Path) -> tuple[str, tuple[int, int] | None]:
    data = Path(path).read_bytes()
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii"), png_size(data)


def _image(fig: Figure) -> str:
    """A plot, embedded."""
    uri, size = data_uri(fig.path)
    dims = f' width="{size[0]}" height="{size[1]}"' if size else ""
    return f'<figure><img src="{uri}" alt="{esc(fig.caption)}"{dims}><figcaption>{esc(fig.caption)}</figcaption></figure>'


def render(comp: Comparison, plots: Sequence[tuple[Path, str]] = ()) -> str:
    """The whole report as one HTML document; `plots` are (PNG path, caption)."""
    s = comp.sweep
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>gatesweep report: {esc(s.name)}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<header><h1>Sweep <code>{esc(s.name)}</code></h1>",
    ]
    parts += [f'<p class="meta">{esc(line.replace("`", ""))}</p>' for line in header_lines(comp)]
    parts.append(f'<p class="meta">store {esc(s.uri)}; generated {esc(time.strftime("%Y-%m-%d %H:%M:%S"))}</p></header>')

    for section in SECTIONS:
        parts += writers.html(section.name, section.heading(comp), section.shown("html", comp, plots), esc, _image)
    parts.append(
        f"<footer>gatesweep report of sweep {esc(s.name)} ({esc(status_counts(comp))}); parent run "
        f"{esc(s.parent.run_id)} in experiment {esc(s.experiment)}. Self-contained: no network, no scripts.</footer>"
    )
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
