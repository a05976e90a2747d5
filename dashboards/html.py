"""The HTML report: ONE self-contained file that opens anywhere with no network.

CSS is inline, every plot is inlined as a base64 `data:image/png` URI, and there is no script at
all, so the file can be mailed, archived, or shown by MLflow's artifact viewer (which renders
HTML artifacts in a sandboxed frame). The tables are those of `dashboards.tables`: mean ± std
with both 95% intervals in each cell's tooltip and the bootstrap one in its own table, deltas
with paired-test p values (raw and Holm-adjusted), the seeds needed per comparison, each arm's
Δ at every level of the other axes, main effects, and every run that did not finish. Wide tables
scroll sideways inside the page with their first column frozen.
"""

from __future__ import annotations

import base64
import html
import struct
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from orchestrator.core.parts import Figure

from .cells import (
    DASH,
    NO_INTERVALS,
    axis_headers,
    boot_text,
    ci_text,
    column_legend,
    delta_boot_text,
    delta_text,
    has_intervals,
    header_lines,
    interaction_cells,
    interaction_legend,
    interaction_title,
    mean_std,
    no_tests_note,
    p_text,
    seeds_cell,
    seeds_cells,
    seeds_legend,
    status_counts,
)
from .comparison import Comparison
from .environments import mixed_note, run_list
from .metrics import axis_text, fmt
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
tr.baseline td{background:#f7f9fc}
tr.failed td{background:#fdecec}
td.status-bad{color:#b42318;font-weight:600}
td.status-ok{color:#2f7a3b}
.sig{color:#2f7a3b;font-weight:600}
.legend{color:#4a5568;font-size:12px;margin:2px 0 10px}
figure{display:inline-block;margin:8px 16px 16px 0;vertical-align:top}
figure img{display:block;max-width:100%;height:auto;border:1px solid #e2e8f0}
figcaption{font-size:12px;color:#4a5568;max-width:720px;margin-top:4px}
h3{font-size:15px;margin:18px 0 6px}
td.sig{color:#2f7a3b;font-weight:600}
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


def _table(header: list[str], rows: list[tuple[str, list[tuple[str, str, str]]]], table_id: str) -> str:
    """rows: (tr class, [(td class, cell html, title)])."""
    out = [
        f'<div class="wrap"><table id="{esc(table_id)}"><thead><tr>'
        + "".join(f"<th>{esc(h)}</th>" for h in header)
        + "</tr></thead><tbody>"
    ]
    for cls, cells in rows:
        tds = "".join(f'<td class="{c}"' + (f' title="{esc(t)}"' if t else "") + f">{v}</td>" for c, v, t in cells)
        out.append(f'<tr class="{cls}">{tds}</tr>')
    out.append("</tbody></table></div>")
    return "\n".join(out)


def _configurations(comp: Comparison, heads: dict, plots: Plots = ()) -> list[str]:
    """The configurations table: mean ± std over seeds, best per column."""
    parts: list[str] = []
    header = [heads[p] for p in comp.axes] + ["n", "status"] + [m.key for m in comp.metrics]
    rows = []
    for row in comp.rows:
        cells = [("", esc(axis_text(row.axes[p])), "") for p in comp.axes]
        cells.append(("num", str(row.n), ""))
        bad = row.status != "ok"
        cells.append(("status-bad" if bad else "status-ok", esc(row.status), ""))
        for m in comp.metrics:
            st = row.stats[m.key]
            title = (
                ""
                if st.mean is None
                else f"n={st.n}"
                if st.n < 2
                else f"n={st.n}; 95% bootstrap {boot_text(st)}; Student's t {ci_text(st)}"
            )
            text = esc(mean_std(st))
            best = m.key in row.best
            cells.append(("num best" if best else "num", f"<strong>{text}</strong>" if best else text, title))
        cls = "failed" if row.n == 0 and bad else ("baseline" if row.is_baseline else "")
        rows.append((cls, cells))
    parts += [
        '<section id="configurations"><h2>Configurations: mean ± std over seeds</h2>',
        _table(header, rows, "table-configurations"),
        '<p class="legend">Best per column highlighted only where it is significantly better after Holm\'s correction '
        "(a row whose Δ against its baseline is significant, or a baseline every row compared with it differs from "
        "significantly); lower is better except MMLU, RULER and throughput; the gate score has no better side. Hover a "
        "cell for n and its 95% confidence interval. – : not logged (the gate score of an ungated model) or no finished "
        "seed. Wide tables scroll sideways; their first column stays."
        + (f" {esc(legend)}" if (legend := column_legend(comp, labels=False)) else "")
        + "</p></section>",
    ]
    return parts


def _intervals(comp: Comparison, heads: dict, plots: Plots = ()) -> list[str]:
    """The bootstrap intervals of the mean."""
    parts: list[str] = []
    if not has_intervals(comp):
        return [f'<section id="ci"><h2>95% intervals of the mean</h2><p class="legend">{esc(NO_INTERVALS)}</p></section>']
    header = [heads[p] for p in comp.axes] + ["n"] + [m.key for m in comp.metrics]
    rows = [
        (
            "",
            [("", esc(axis_text(r.axes[p])), "") for p in comp.axes]
            + [("num", str(r.n), "")]
            + [("num", esc(boot_text(r.stats[m.key])), f"Student's t: {ci_text(r.stats[m.key])}") for m in comp.metrics],
        )
        for r in comp.rows
    ]
    parts += [
        '<section id="ci"><h2>95% intervals of the mean (percentile bootstrap over seeds)</h2>',
        _table(header, rows, "table-ci"),
        '<p class="legend">2.5th and 97.5th percentiles of the means of the seeds resampled with replacement (every '
        "resample for ≤ 6 seeds): inside the values' range, never below 0 for a non-negative metric, but close to that "
        "range with 2–3 seeds. Hover a cell for Student's t interval, mean ± t(0.975, n−1)·std/√n. None for n &lt; 2."
        "</p></section>",
    ]
    return parts


def _deltas(comp: Comparison, heads: dict, plots: Plots = ()) -> list[str]:
    """The Δ table against the baseline and the seeds-needed lines."""
    parts: list[str] = []
    drows = [r for r in comp.rows if r.baseline is not None]
    note = no_tests_note(comp)
    if drows:
        header = [heads[p] for p in comp.axes] + ["pairs"] + [m.key for m in comp.metrics]
        rows = []
        for row in drows:
            cells = [("", esc(axis_text(row.axes[p])), "") for p in comp.axes]
            cells.append(("num", str(max((d.n_pairs for d in row.deltas.values()), default=0)), ""))
            for m in comp.metrics:
                d = row.deltas.get(m.key)
                if d is None:
                    cells.append(("num", DASH, ""))
                    continue
                ptext = f"p {esc(p_text(d.p))}" + (f" · Holm {esc(p_text(d.p_holm))}" if d.p_holm is not None else "")
                p = "" if note else (f'<span class="sig">{ptext}</span>' if d.significant else ptext)
                tip = "" if note else f"95% bootstrap {delta_boot_text(d, row.baseline.stats[m.key])}"
                tip += f"; t={d.t:.3f}; seeds for 80% power (power now): {seeds_cell(d)}" if d.t is not None else ""
                cells.append(("num", f"{esc(delta_text(d, row.baseline.stats[m.key]))}" + (f"<br>{p}" if p else ""), tip))
            rows.append(("", cells))
        parts += [
            f'<section id="deltas"><h2>Δ against the baseline ({esc(comp.baseline_text)}; other axes equal)</h2>',
            _table(header, rows, "table-deltas"),
            f'<p class="legend">Δ = mean − baseline mean (relative Δ). {esc(note)}</p>'
            if note
            else '<p class="legend">Δ = mean − baseline mean (relative Δ); p: two-sided paired t-test over the seeds both '
            f"rows finished (none with fewer than 2 pairs); Holm: p adjusted by Holm's method over the {comp.n_tests} tests "
            "of this table; in green when significant at 0.05 after it. Hover a cell for the bootstrap interval of Δ.</p>",
            "</section>",
        ]
    return parts


def _seeds(comp: Comparison, heads: dict, plots: Plots = ()) -> list[str]:
    """The seeds-needed table: per comparison and metric, the seeds 80% power takes (the whole
    sentence in the cell's tooltip)."""
    header, body, notes = seeds_cells(comp)
    if not body or no_tests_note(comp):  # one seed: the Δ section says what the tests need
        return []
    rows = [
        (
            "",
            [("num" if j >= len(comp.axes) else "", esc(cell), note) for j, (cell, note) in enumerate(zip(cells, says))],
        )
        for cells, says in zip(body, notes)
    ]
    return [
        '<section id="seeds"><h2>Seeds needed</h2>',
        _table([heads.get(h, h) for h in header], rows, "table-seeds"),
        f'<p class="legend">{esc(seeds_legend(comp))} Hover a cell for the whole comparison.</p></section>',
    ]


def _interactions(comp: Comparison, heads: dict, plots: Plots = ()) -> list[str]:
    """Each arm's Δ at every level of each other axis."""
    if not comp.interactions:
        return []
    parts = ['<section id="interactions"><h2>Interactions: each arm\'s Δ at every level of the other axes</h2>']
    for inter in comp.interactions:
        header, body = interaction_cells(comp, inter)
        rows = []
        for cells, (metric, arm, cellobjs) in zip(body, _interaction_objects(comp, inter)):
            tds = [("", esc(metric), ""), ("", esc(arm), "")]
            for text, c in zip(cells[2:], cellobjs):
                tip = ""
                if c.delta is not None:
                    tip = f"p {p_text(c.delta.p)}, Holm {p_text(c.delta.p_holm)}; 95% bootstrap {delta_boot_text(c.delta, c.base)}"
                tds.append(("num sig" if c.significant else "num", esc(text), tip))
            rows.append(("", tds))
        parts += [f"<h3>{esc(interaction_title(comp, inter))}</h3>", _table(header, rows, f"table-interaction-{inter.axis}")]
    parts.append(f'<p class="legend">{esc(interaction_legend(comp, "green"))} Hover a cell for its test.</p></section>')
    return parts


def _interaction_objects(comp: Comparison, inter):
    for m in comp.metrics:
        table = inter.cells.get(m.key)
        if table is not None:
            for arm in inter.arms:
                yield m.key, arm, table[arm]


def _effects(comp: Comparison, heads: dict, plots: Plots = ()) -> list[str]:
    """Main effects per axis."""
    parts: list[str] = []
    if comp.effects:
        parts.append('<section id="effects"><h2>Main effects (each metric averaged over the other axes)</h2>')
        for axis, effects in comp.effects.items():
            header = [comp.axis_title(axis), "configs"] + [m.key for m in comp.metrics]
            rows = [
                (
                    "",
                    [("", esc(axis_text(e.level)), ""), ("num", str(e.configs), "")]
                    + [("num", esc(fmt(e.means[m.key])), "") for m in comp.metrics],
                )
                for e in effects
            ]
            parts.append(_table(header, rows, f"table-effect-{axis}"))
        parts.append("</section>")
    return parts


def _unfinished(comp: Comparison, heads: dict, plots: Plots = ()) -> list[str]:
    """Runs that did not finish, and superseded runs."""
    parts: list[str] = []
    for title, runs, tid in (
        ("Runs that did not finish", comp.unfinished, "table-unfinished"),
        ("Superseded runs (another run of the same seed cell counts)", comp.superseded, "table-superseded"),
    ):
        if not runs:
            continue
        header = ["run", "state", "reason"] + [heads[p] for p in comp.axes] + ["run id"]
        bad = tid == "table-unfinished"
        rows = [
            (
                "failed" if bad and r.state == "failed" else "",
                [("", esc(r.name), ""), ("status-bad" if bad else "", esc(r.state), ""), ("", esc(r.reason or DASH), "")]
                + [("", esc(axis_text(r.axes.get(p, "?"))), "") for p in comp.axes]
                + [("", f"<code>{esc(r.run_id)}</code>", "")],
            )
            for r in runs
        ]
        parts += [f'<section id="{tid[6:]}"><h2>{esc(title)}</h2>', _table(header, rows, tid), "</section>"]
    return parts


def _environments(comp: Comparison, heads: dict, plots: Plots = ()) -> list[str]:
    """The numeric environments, when the counted runs come from more than one."""
    note = mixed_note(comp.environments)
    if not note:
        return []
    rows = [
        (
            "",
            [
                ("", esc(env.label), ""),
                ("", f"<code>{esc(env.key)}</code>", ""),
                ("num", str(len(env.runs)), ""),
                ("", esc(run_list(env.runs)), ""),
            ],
        )
        for env in comp.environments
    ]
    return [
        '<section id="numerics"><h2>Numeric environments</h2>',
        f"<p>{esc(note[0].upper() + note[1:])}.</p>",
        _table(["environment", "key", "runs", "names"], rows, "table-numerics"),
        "</section>",
    ]


def _image(fig: Figure) -> str:
    """A plot, embedded."""
    uri, size = data_uri(fig.path)
    dims = f' width="{size[0]}" height="{size[1]}"' if size else ""
    return f'<figure><img src="{uri}" alt="{esc(fig.caption)}"{dims}><figcaption>{esc(fig.caption)}</figcaption></figure>'


HTML_SECTIONS: list[Callable[[Comparison, dict, Plots], list[str]]] = [
    _configurations,
    _intervals,
    _deltas,
    _seeds,
    _interactions,
    _effects,
    _unfinished,
    _environments,
]
"""The comparison's tables in order, one function each (comparison, axis headers, plots) -> HTML
parts; a section with nothing to show returns none. The sections after them (the ladder, the
plots) are the neutral ones of `dashboards.sections.SECTIONS`, written by its HTML part writer."""


def render(comp: Comparison, plots: Sequence[tuple[Path, str]] = ()) -> str:
    """The whole report as one HTML document; `plots` are (PNG path, caption)."""
    s = comp.sweep
    heads = axis_headers(comp.axes)
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

    for section in HTML_SECTIONS:
        parts += section(comp, heads, plots)
    for neutral in SECTIONS:
        parts += writers.html(neutral.name, neutral.title, neutral.parts(comp, plots), esc, _image)
    parts.append(
        f"<footer>gatesweep report of sweep {esc(s.name)} ({esc(status_counts(comp))}); parent run "
        f"{esc(s.parent.run_id)} in experiment {esc(s.experiment)}. Self-contained: no network, no scripts.</footer>"
    )
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
