"""A ladder sweep in the report: the comparison's rows as the ladder's records, analysed and laid
out by `orchestrator.ladder` (one definition of arm, baseline and rung for the report and the
driver's promotion), written in each format as the report's `ladder` section (`dashboards.sections`)
and drawn as plots.

An **arm** is a configuration without its rung: the rows of the comparison that differ only in
`ladder.rung`; the **baseline arm** is chosen by `orchestrator.ladder.runs.baseline_of` (no gate,
softmax attention, the first such arm in the sweep's order; `--baseline AXIS=VALUE` in the keys of
the sweep file picks another, e.g. the parameter-matched one). Every run's compute is its own
`train_flops` (what its variant adds per token included); a run trained with a WSD-S schedule
adds the points it read at the bottom of each earlier decay (`wsd/<i>/...`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path

from gatedmodels import ModelConfig
from gatedmodels.costs import model_costs
from orchestrator.core import metrics as registry
from orchestrator.ladder import section as sec
from orchestrator.ladder.answers import REPLICATES
from orchestrator.ladder.runs import RUNG_AXIS, Arm, Run, baseline_of, describe, run_from_metrics, unknown_keys
from orchestrator.ladder.section import LadderReport

from . import figures
from .comparison import Comparison, Row
from .records import StoreError, finite
from .sections import LADDER, ladder_report_parts, writers

COMPUTE = registry.get("train_flops").name
FIT_METRICS = ("val_loss", "val_bpb")
"""Fitted when the runs logged them: the held-out loss, and bits per byte (comparable across tokenizers)."""
TARGET_TOKENS = 4e11
TARGET_PRESET = "dense-1.7b"
TARGET_SEQ = 4096
LADDER_FITS, LADDER_MULTIPLIERS, LADDER_TRENDS = "ladder_fits.png", "ladder_multipliers.png", "ladder_trends.png"
PLOTS = (LADDER_FITS, LADDER_MULTIPLIERS, LADDER_TRENDS)


def default_target() -> tuple[float, str]:
    """The paper's dense model: dense-1.7b trained on 400B tokens at 4,096 tokens a sequence."""
    flops = model_costs(ModelConfig.preset(TARGET_PRESET)).train_flops(TARGET_SEQ) * TARGET_TOKENS
    return flops, f"{TARGET_PRESET} x 400B tokens (the paper's dense model)"


def file_settings(doc: object) -> tuple[float | None, dict[str, str]]:
    """The sweep file's `ladder.margin` and `ladder.promote.baseline` (the report's defaults, so the
    report judges against the baseline the driver promoted against); a malformed part is ignored."""
    lad = doc.get("ladder") if isinstance(doc, dict) else None
    if not isinstance(lad, dict):
        return None, {}
    margin = lad.get("margin")
    margin = float(margin) if isinstance(margin, (int, float)) and not isinstance(margin, bool) and 0 < margin < 10 else None
    promote = lad.get("promote")
    base = promote.get("baseline") if isinstance(promote, dict) else None
    return margin, ({str(k): str(v) for k, v in base.items()} if isinstance(base, dict) else {})


# ---- the comparison as records ---------------------------------------------------------------------------
def arms_of(comp: Comparison) -> list[tuple[Arm, list[Row]]]:
    """The arms in the sweep's order, each with its rows (one per rung)."""
    others = [a for a in comp.axes if a != RUNG_AXIS]
    groups: dict[tuple, tuple[Arm, list[Row]]] = {}
    for row in comp.rows:
        key = tuple(row.axes[a] for a in others)
        if key not in groups:
            label = row.label(others) if others else "all runs"
            run = next(iter(row.counted.values()), None) or next(iter(row.live_runs()), None)
            config = dict(run.params) if run is not None else {}
            groups[key] = (Arm(label, {a: row.axes[a] for a in others}, config), [])
        groups[key][1].append(row)
    return list(groups.values())


def runs_of(arm: Arm, rows: list[Row], metric: str) -> list[Run]:
    out = []
    for row in rows:
        for seed, rec in row.counted.items():
            label = "|".join(str(s) for s in seed) if isinstance(seed, tuple) else str(seed)
            out.append(run_from_metrics(arm.label, row.axes[RUNG_AXIS], label, rec.metrics, metric))
    return out


def analyse(
    comp: Comparison,
    *,
    target: float | None = None,
    baseline: Mapping[str, str] | None = None,
    margin: float | None = None,
    replicates: int = REPLICATES,
) -> LadderReport | None:
    """The ladder section of a comparison whose axes include `ladder.rung` (None otherwise).
    StoreError when `baseline` names a key or value no arm has."""
    if RUNG_AXIS not in comp.axes:
        return None
    target_label = "given on the command line"
    if target is None:
        target, target_label = default_target()
    groups = arms_of(comp)
    arms = [a for a, _ in groups]
    want = dict(baseline or {})
    missing = unknown_keys(arms, want)
    if missing:
        raise StoreError(f"--baseline {missing[0]}: no arm of this ladder has it; its arms have {describe(arms)}")
    base = baseline_of(arms, want)
    if want and base is None:
        raise StoreError(
            f"--baseline {', '.join(f'{k}={v}' for k, v in want.items())}: no arm has these values; its arms have {describe(arms)}"
        )
    notes, counts = [], {}
    for arm, rows in groups:
        counts[arm.label] = {}
        for row in rows:
            rung = row.axes[RUNG_AXIS]
            counts[arm.label][rung] = (row.n, len(row.live_runs()))
            no_flops = sum(1 for r in row.counted.values() if not finite(r.metrics.get(COMPUTE)))
            if no_flops:
                notes.append(f"{arm.label} at {rung}: {no_flops} finished run(s) logged no {COMPUTE} and are left out of the fits")
            if row.n < len(row.live_runs()):
                notes.append(f"{arm.label} at {rung}: the fits use the {row.n} of {len(row.live_runs())} seeds that finished")
    fitted = {
        m: [r for arm, rows in groups for r in runs_of(arm, rows, m)]
        for m in FIT_METRICS
        if any(finite(r.metrics.get(m)) for row in comp.rows for r in row.counted.values())
    }
    return sec.build(
        fitted, arms, base, target=target, target_label=target_label, margin=margin, replicates=replicates,
        trends=_trends(groups), counts=counts, notes=notes,
    )  # fmt: skip


def _trends(groups: list[tuple[Arm, list[Row]]]) -> dict:
    out: dict = {}
    for metric in sec.TREND_METRICS:
        per_arm: dict = {}
        for arm, rows in groups:
            for row in rows:
                vals = [r.metrics[metric] for r in row.counted.values() if finite(r.metrics.get(metric))]
                if not vals:
                    continue
                mean = math.fsum(vals) / len(vals)
                std = math.sqrt(math.fsum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else None
                per_arm.setdefault(arm.label, {})[row.axes[RUNG_AXIS]] = (mean, std, len(vals))
        if per_arm:
            out[metric] = per_arm
    return out


# ---- the formats: the ladder's section through the part writers (`dashboards.sections`) ------------------
def terminal(rep: LadderReport) -> str:
    return writers.terminal(ladder_report_parts(rep))


def markdown(rep: LadderReport) -> str:
    return "\n" + "\n".join(writers.markdown(LADDER.title, ladder_report_parts(rep))) + "\n"


def latex(rep: LadderReport, tex: Callable[[str], str]) -> str:
    """Every table as a booktabs table (`tex` escapes text); the lines as comments."""
    return writers.latex(ladder_report_parts(rep), tex)


def html(rep: LadderReport, esc: Callable[[object], str]) -> list[str]:
    return writers.html(LADDER.name, LADDER.title, ladder_report_parts(rep), esc, lambda _figure: "")


# ---- the document --------------------------------------------------------------------------------------
def json_doc(rep: LadderReport) -> dict:
    return sec.document(rep)


# ---- plots --------------------------------------------------------------------------------------------------
def draw(rep: LadderReport, out: Path) -> list[tuple[Path, str]]:
    """Loss against compute with the laws, the multipliers with their bands, the sink trends."""
    made: list[tuple[Path, str]] = []
    order = sorted(rep.arms, key=lambda a: a.label != rep.baseline)
    an = rep.analyses[0] if rep.analyses else None
    if an is not None:
        arms = []
        for arm in order:
            pts = [(c.compute, c.loss) for c in an.cells if c.arm == arm.label]
            res = an.arms.get(arm.label)
            law = res.law if res is not None else None
            curve = None
            if law is not None and an.form == "L(C)":
                curve = (law.E, law.A[0], law.alpha)
            arms.append(figures.LadderArm(arm.label, pts, curve))
        made.append(
            (
                figures.ladder_fits(arms, rep.target, out / LADDER_FITS, an.metric, f"{an.metric} against training compute"),
                f"{an.metric} of every cell (an arm at a rung{', and at each WSD-S decay' if an.form == 'L(N, D)' else ''}; geometric "
                f"mean over seeds) against its training FLOPs (log-log), one colour per arm"
                + ("; lines: each arm's fitted L(C) = E + A·C^-α" if an.form == "L(C)" else "")
                + f"; {sec.target_text(rep, an)}",
            )
        )
        series = []
        for arm in order:
            res = an.arms.get(arm.label)
            if res is None or arm.label == an.baseline:
                continue
            rungs = [r for r in an.rungs if r in res.rungs and r in an.compute.get(arm.label, {})]
            series.append(
                (
                    arm.label,
                    [an.compute[arm.label][r] for r in rungs],
                    *([getattr(res.rungs[r], k) for r in rungs] for k in ("value", "low", "high")),
                )
            )
        if series:
            made.append(
                (
                    figures.ladder_multipliers(series, out / LADDER_MULTIPLIERS, f"effective-compute multiplier vs {an.baseline}"),
                    f"Each arm's anchored effective-compute multiplier against {an.baseline} at its rungs ({an.metric}), with its 95% "
                    "band (paired bootstrap over seeds); above the dashed 1 the arm is worth more compute than it costs.",
                )
            )
    panels = []
    for metric in sec.TREND_METRICS:
        per_arm = rep.trends.get(metric)
        if not per_arm or an is None:
            continue
        arms_series = []
        for arm in order:
            v = per_arm.get(arm.label, {})
            rungs = [r for r in an.rungs if r in v and r in an.compute.get(arm.label, {})]
            arms_series.append(
                (arm.label, [an.compute[arm.label][r] for r in rungs], [v[r][0] for r in rungs], [v[r][1] or 0.0 for r in rungs])
            )
        panels.append((metric, arms_series))
    if panels:
        made.append(
            (
                figures.ladder_trends(panels, out / LADDER_TRENDS),
                "The sink metrics at each rung (mean ± std over seeds) against compute: does the baseline's sink grow with "
                "scale, and does the gated arm's stay away?",
            )
        )
    return made
