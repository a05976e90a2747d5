"""A ladder's section of the report (`dashboards.ladder.Ladder`) in every format: the same tables as
cells (`ladder_tables`), then terminal text, markdown, LaTeX, HTML and the JSON document's
`ladder` object."""

from __future__ import annotations

import math
from collections.abc import Callable

from orchestrator import metrics as registry
from orchestrator.scaling import Interval

from .ladder import RUNG_AXIS, Ladder, MetricFit, target_text

DASH = "–"


def num(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return DASH
    if math.isinf(x):
        return "∞" if x > 0 else "-∞"
    if x != 0 and (abs(x) >= 1e4 or abs(x) < 1e-3):
        return f"{x:.{max(1, digits - 1)}e}"
    return f"{x:.{digits}g}"


def interval(iv: Interval | None) -> str:
    if iv is None:
        return DASH
    return f"{num(iv.value)} [{num(iv.low)}, {num(iv.high)}]"


def _metric_label(metric: str) -> str:
    m = registry.lookup(metric)
    return m.paper or metric if m is not None else metric


def header_lines(ladder: Ladder) -> list[str]:
    e = "one E shared by every arm" if ladder.shared_e else "E, A and α per arm"
    how = "redrawing each fit's residuals" if ladder.bootstrap == "residuals" else "over seeds"
    return [
        f"Scaling ladder: {len(ladder.rungs)} rungs, {len(ladder.arms)} arms; L(C) = E + A·C^-α of the held-out loss against "
        f"training FLOPs ({e}; Huber loss on log L), 95% intervals from {ladder.replicates} bootstrap replicates ({how}).",
        f"Effective-compute multiplier: the baseline's compute that reaches an arm's fitted loss, over the arm's own FLOPs "
        f"(>1: the arm is worth more compute). Baseline arm: {ladder.baseline or DASH}; {target_text(ladder)}.",
    ]


def loss_cells(ladder: Ladder, metric: str) -> tuple[list[str], list[list[str]]]:
    """Per rung: the baseline's compute, then each arm's mean ± std of `metric` (n)."""
    head = ["rung", "FLOPs (baseline)", *[a.label for a in ladder.arms]]
    body = []
    for rung in ladder.rungs:
        cells = [rung, num(ladder.compute.get(ladder.baseline, {}).get(rung))]
        for arm in ladder.arms:
            row = next((r for r in arm.rows if r.axes[RUNG_AXIS] == rung), None)
            vals = [r.metrics[metric] for r in row.counted.values() if metric in r.metrics] if row else []
            vals = [v for v in vals if isinstance(v, float) and math.isfinite(v)]
            if not vals:
                cells.append(DASH)
                continue
            mean = math.fsum(vals) / len(vals)
            std = math.sqrt(math.fsum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else None
            cells.append(f"{mean:.4f}" + (f" ± {std:.4f}" if std is not None else "") + f" ({len(vals)})")
        body.append(cells)
    return head, body


def fit_cells(mf: MetricFit) -> tuple[list[str], list[list[str]]]:
    head = ["arm", "α [95%]", "E [95%]", "A", "rmse(log L)"]
    fit = mf.fit
    if fit is None:
        return head, []
    return head, [[arm, interval(fit.alpha[arm]), interval(fit.E[arm]), num(law.A), num(law.rmse, 2)] for arm, law in fit.laws.items()]


def multiplier_cells(ladder: Ladder, mf: MetricFit) -> tuple[list[str], list[list[str]]]:
    head = ["arm", *ladder.rungs, "target"]
    fit = mf.fit
    if fit is None:
        return head, []
    body = []
    for arm, per in fit.multipliers.items():
        body.append([arm, *[interval(per.get(r)) for r in ladder.rungs], interval(fit.target[arm])])
    return head, body


def verdict_lines(ladder: Ladder, mf: MetricFit) -> list[str]:
    if mf.fit is None:
        return [f"{mf.metric}: no fit ({mf.no_fit})"]
    out = []
    for arm, per in mf.verdicts.items():
        rungs = [per[r] for r in ladder.rungs if r in per]
        at_rungs = (
            rungs[0] + " at every rung" if rungs and len(set(rungs)) == 1 else ", ".join(f"{r}: {per[r]}" for r in ladder.rungs if r in per)
        )
        out.append(f"{arm} vs {ladder.baseline} ({mf.metric}): {at_rungs}; at the target: {per['target']} ({interval(mf.fit.target[arm])})")
    return out


def trend_cells(ladder: Ladder, metric: str) -> tuple[list[str], list[list[str]]]:
    head = ["rung", *[a.label for a in ladder.arms]]
    per_arm = ladder.trends.get(metric, {})
    body = []
    for rung in ladder.rungs:
        cells = [rung]
        for arm in ladder.arms:
            v = per_arm.get(arm.label, {}).get(rung)
            cells.append(DASH if v is None else num(v[0]) + (f" ± {num(v[1], 2)}" if v[1] is not None else ""))
        body.append(cells)
    return head, body


def note_lines(ladder: Ladder) -> list[str]:
    out = list(ladder.notes)
    for mf in ladder.fits:
        if mf.fit is not None:
            out += [f"{mf.metric}: {n}" for n in mf.fit.notes]
    return out


def _sections(ladder: Ladder) -> list[tuple[str, tuple[list[str], list[list[str]]] | list[str]]]:
    """(title, table or lines) in report order."""
    out: list[tuple[str, tuple[list[str], list[list[str]]] | list[str]]] = []
    for mf in ladder.fits:
        label = _metric_label(mf.metric)
        out.append((f"{mf.metric} ({label}) per rung, mean ± std (finished seeds)", loss_cells(ladder, mf.metric)))
        if mf.fit is None:
            out.append((f"fit of {mf.metric}", [f"no fit: {mf.no_fit}"]))
            continue
        out.append((f"fit of {mf.metric}: L(C) = E + A·C^-α", fit_cells(mf)))
        out.append(
            (
                f"effective-compute multiplier vs {ladder.baseline} ({mf.metric}), at each rung and at the target",
                multiplier_cells(ladder, mf),
            )
        )
        out.append((f"verdicts ({mf.metric})", verdict_lines(ladder, mf)))
    if not ladder.fits:
        out.append(("fits", ["no fit: no run logged val_loss"]))
    for metric in ladder.trends:
        out.append((f"{metric} per rung (does the sink grow with scale?)", trend_cells(ladder, metric)))
    notes = note_lines(ladder)
    if notes:
        out.append(("notes", notes))
    return out


def _grid(head: list[str], body: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in body]
    return lines


def ladder_terminal(ladder: Ladder) -> str:
    lines = ["", *header_lines(ladder)]
    for title, part in _sections(ladder):
        lines += ["", title]
        lines += _grid(*part) if isinstance(part, tuple) else [f"  {x}" for x in part]
    return "\n".join(lines) + "\n"


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def ladder_markdown(ladder: Ladder) -> str:
    lines = ["", "## Scaling ladder", "", *header_lines(ladder)]
    for title, part in _sections(ladder):
        lines += ["", f"### {title}", ""]
        if isinstance(part, tuple):
            head, body = part
            lines += ["| " + " | ".join(_md_escape(h) for h in head) + " |", "|" + "---|" * len(head)]
            lines += ["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in body]
        else:
            lines += [f"- {x}" for x in part]
    return "\n".join(lines) + "\n"


def ladder_latex(ladder: Ladder, tex: Callable[[str], str]) -> str:
    """The fit and multiplier tables as booktabs tables (`tex` escapes text)."""
    out = []
    for mf in ladder.fits:
        for title, (head, body) in (
            (f"Fit of {mf.metric}: $L(C) = E + A C^{{-\\alpha}}$", fit_cells(mf)),
            (f"Effective-compute multiplier vs {ladder.baseline} ({mf.metric})", multiplier_cells(ladder, mf)),
        ):
            if not body:
                continue
            out += [
                "\\begin{table}[t]",
                "\\centering",
                f"\\caption{{{title if title.startswith('Fit') else tex(title)}}}",
                "\\begin{tabular}{l" + "r" * (len(head) - 1) + "}",
                "\\toprule",
                " & ".join(tex(h) for h in head) + " \\\\",
                "\\midrule",
                *[" & ".join(tex(c) for c in row) + " \\\\" for row in body],
                "\\bottomrule",
                "\\end{tabular}",
                "\\end{table}",
                "",
            ]
        if mf.fit is None:
            out.append(f"% no fit of {tex(mf.metric)}: {tex(mf.no_fit)}")
    return "\n".join(out) + "\n"


def ladder_html(ladder: Ladder, esc: Callable[[object], str]) -> list[str]:
    out = ['<section id="ladder"><h2>Scaling ladder</h2>', *[f"<p>{esc(x)}</p>" for x in header_lines(ladder)]]
    for title, part in _sections(ladder):
        out.append(f"<h3>{esc(title)}</h3>")
        if isinstance(part, tuple):
            head, body = part
            out.append('<div class="scroll"><table><thead><tr>' + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr></thead><tbody>")
            out += ["<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in body]
            out.append("</tbody></table></div>")
        else:
            out.append("<ul>" + "".join(f"<li>{esc(x)}</li>" for x in part) + "</ul>")
    out.append("</section>")
    return out


def ladder_json(ladder: Ladder) -> dict:
    """The `ladder` object of the report's JSON (its keys are documented in docs/reading-results.md)."""
    from .ladder import EXTRAPOLATION

    fits = {}
    for mf in ladder.fits:
        fit = mf.fit
        if fit is None:
            fits[mf.metric] = {"no_fit": mf.no_fit}
            continue
        fits[mf.metric] = {
            "no_fit": None,
            "arms": {
                arm: {
                    "alpha": fit.alpha[arm].to_dict(),
                    "E": fit.E[arm].to_dict(),
                    "A": law.A,
                    "rmse_log": law.rmse,
                    "multiplier": None
                    if arm == ladder.baseline
                    else {
                        "rungs": {r: iv.to_dict() for r, iv in fit.multipliers[arm].items()},
                        "target": fit.target[arm].to_dict(),
                    },
                    "verdict": None if arm == ladder.baseline else mf.verdicts.get(arm),
                }
                for arm, law in fit.laws.items()
            },
            "failed_replicates": fit.failed_replicates,
            "notes": fit.notes,
        }
    return {
        "baseline": ladder.baseline,
        "rungs": [
            {
                "rung": r,
                "compute": {arm: ladder.compute[arm].get(r) for arm in ladder.compute},
                "runs": {a: list(v.get(r, (0, 0))) for a, v in ladder.runs.items()},
            }
            for r in ladder.rungs
        ],
        "arms": [{"label": a.label, "axes": a.axes, "is_baseline": a.is_baseline} for a in ladder.arms],
        "target": {
            "flops": ladder.target,
            "label": ladder.target_label,
            "beyond_largest_rung": None if math.isnan(ladder.beyond) else ladder.beyond,
            "extrapolated": bool(math.isfinite(ladder.beyond) and ladder.beyond > EXTRAPOLATION),
        },
        "shared_E": ladder.shared_e,
        "bootstrap": ladder.bootstrap,
        "bootstrap_replicates": ladder.replicates,
        "fits": fits,
        "trends": {
            metric: {arm: {r: {"mean": v[0], "std": v[1], "n": v[2]} for r, v in per.items()} for arm, per in arms.items()}
            for metric, arms in ladder.trends.items()
        },
        "notes": note_lines(ladder),
    }
