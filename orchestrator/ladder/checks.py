"""The checks of an analysis that look across rungs and arms: the rollout (the largest rung
predicted from the others), the joint multiplier and its trend over the rungs, and the verdicts
with their family-wise control (Holm)."""

from __future__ import annotations

import math

import numpy as np

from . import multipliers as mx
from .answers import ONE_SEED, Analysis, ArmResult, Rollout, verdict
from .cells import Cell, Estimate, estimate, holm
from .context import Ctx
from .laws import NoFit


# ---- the rollout check ------------------------------------------------------------------------------------
def predict(ctx: Ctx, theta: np.ndarray, cell: Cell) -> np.ndarray:
    if ctx.form == "L(C)":
        return mx.loss_c(theta, math.log(cell.compute))
    return mx.loss_nd(theta, math.log(cell.params), math.log(cell.tokens))


def rollout(ctx: Ctx, res: ArmResult) -> None:
    """The arm's law fitted on every rung but its largest predicts that rung's loss; the interval
    of log(predicted / measured) comes from the seeds' noise alone (the lack of fit is what this
    check tests, so it is not allowed for)."""
    mine = [r for r in ctx.rungs if (res.arm, r) in ctx.final]
    if len(mine) < 4:
        res.rollout = Rollout(
            mine[-1] if mine else "",
            Estimate(math.nan),
            Estimate(math.nan),
            note=f"no check: {len(mine)} rung(s); fitting all but the largest needs 4",
        )
        return
    last = mine[-1]
    j = ctx.final[(res.arm, last)]
    cell = ctx.cells[j]
    try:
        cols = ctx.arm_cells(res.arm, mine[:-1])
        law = ctx.fit_law(cols, res.arm)
        samples = ctx.refit_law(law, cols, noise_only=True)
    except NoFit as err:
        res.rollout = Rollout(last, Estimate(math.nan), Estimate(cell.loss), note=f"no check: {err}")
        return
    pred = float(predict(ctx, law.theta(), cell))
    if samples is None or cell.n < 2:
        res.rollout = Rollout(last, Estimate(pred, note=ONE_SEED), Estimate(cell.loss, note=ONE_SEED), note=f"no check: {ONE_SEED}")
        return
    pred_s = predict(ctx, samples, cell)
    meas_s = np.exp(ctx.noise_draws.moved[:, j])
    with np.errstate(all="ignore"):
        gap = estimate(math.log(pred / cell.loss) if pred > 0 else math.nan, np.log(pred_s / meas_s), null=0.0)
    holds = None if gap.p is None else bool(gap.p >= 0.05)
    res.rollout = Rollout(last, estimate(pred, pred_s), estimate(cell.loss, meas_s), gap, holds)


# ---- every rung at once: the joint multiplier and its trend ------------------------------------------------
def _weights(ctx: Ctx, base: ArmResult, res: ArmResult, rungs: list[str]) -> dict[str, float]:
    """Weights of the rungs' log-multipliers: the inverse of their variance as the noise trend
    predicts it (delta method: a rung's log m moves by slope·(L − floor)/L per unit of log loss, and
    its paired mean's noise is s̃(C)²/n), not as each rung's own seeds measured it — with three
    seeds those variances are so noisy that weighting by them would trust the rungs whose seeds
    happened to agree, and make the pooled interval too narrow."""
    out = {}
    if base.law is None:
        return out
    for rung in rungs:
        cb, ca = ctx.cells[ctx.final[(ctx.baseline, rung)]], ctx.cells[ctx.final[(res.arm, rung)]]
        floor, slope = mx.path_c(base.law.theta()) if ctx.form == "L(C)" else mx.path_nd(base.law.theta(), cb.params)
        gap = cb.loss - float(floor)
        sd = ctx.noise.sd(cb.compute) if ctx.noise.cells else 1.0
        n = min(ca.n, cb.n)
        if gap > 0 and n > 1 and math.isfinite(sd) and sd > 0:
            out[rung] = (float(slope) * gap / cb.loss) ** 2 * n / sd**2
    return out


def joint(ctx: Ctx, an: Analysis) -> None:
    """Per arm, one log-multiplier for every rung: the rungs' anchored log-multipliers pooled with
    inverse-variance weights, and their trend against log compute (weighted least squares); each
    replicate pooled with the same weights, so the intervals carry every correlation the rungs
    share (the baseline's law, the seeds). This is the joint fit of one log-multiplier per arm
    with the baseline's E and α shared and a free compute shift per rung: a lack of fit at a rung,
    which both arms share, cancels instead of biasing the shared curve."""
    for arm, res in an.arms.items():
        if arm == ctx.baseline:
            continue
        values = [r for r in ctx.rungs if r in res.rungs and math.isfinite(res.rungs[r].value) and res.rungs[r].value > 0]
        if not values:
            notes = [res.rungs[r].note for r in ctx.rungs if r in res.rungs and res.rungs[r].note]
            res.joint = Estimate(math.nan, note=_no_interval(notes[0] if notes else "no rung where both arms finished"))
            continue
        w = _weights(ctx, an.arms[ctx.baseline], res, [r for r in values if r in res.rung_samples])
        rungs = [r for r in values if r in w]
        if not rungs:
            mean = float(np.exp(np.mean([math.log(res.rungs[r].value) for r in values])))
            notes = [res.rungs[r].note for r in values if res.rungs[r].note]
            res.joint = Estimate(mean, note=_no_interval(notes[0] if notes else "no rung has an interval"))
            continue
        if len(rungs) < len(values):
            an.notes.append(f"{arm}: the joint multiplier leaves out {', '.join(r for r in values if r not in rungs)} (no interval there)")
        wv = np.array([w[r] for r in rungs])
        x = np.array([math.log(ctx.compute_at(r)) for r in rungs])
        point = np.array([math.log(res.rungs[r].value) for r in rungs])
        samples = np.stack([res.rung_samples[r] for r in rungs], axis=1)
        with np.errstate(all="ignore"):
            pooled = (samples * wv).sum(axis=1) / wv.sum()
            res.joint = estimate(float(np.exp((point * wv).sum() / wv.sum())), np.exp(pooled), null=1.0)
            if len(rungs) >= 3:
                res.trend = _trend(x, wv, point, samples)
                res.trend_data = (x, wv, point, samples)


def predict_multiplier(res: ArmResult, compute: float) -> Estimate | None:
    """The multiplier the arm's trend over its rungs predicts at `compute` (the weighted line of log m
    against log compute, refitted in every replicate); None without a trend (fewer than 3 rungs)."""
    if res.trend_data is None:
        return None
    x, w, point, samples = res.trend_data
    xc = x - np.average(x, weights=w)
    den = float((w * xc * xc).sum())
    at = math.log(compute) - np.average(x, weights=w)
    with np.errstate(all="ignore"):
        level = (point * w).sum() / w.sum()
        slope = (w * xc * (point - level)).sum() / den
        levels = (samples * w).sum(axis=1) / w.sum()
        slopes = (w * xc * (samples - levels[:, None])).sum(axis=1) / den
        pred = np.where(np.isinf(samples).any(axis=1), np.inf, levels + slopes * at)
        return estimate(float(np.exp(level + slope * at)), np.exp(pred), null=1.0)


def _no_interval(note: str) -> str:
    return note if note.startswith("no interval") else f"no interval: {note}"


def _trend(x: np.ndarray, w: np.ndarray, point: np.ndarray, samples: np.ndarray) -> Estimate:
    """The slope of log m against log compute (per decade of compute... per e-fold), weighted."""
    xc = x - np.average(x, weights=w)
    den = float((w * xc * xc).sum())
    with np.errstate(all="ignore"):
        slope = float((w * xc * (point - np.average(point, weights=w))).sum() / den)
        ys = samples - (samples * w).sum(axis=1, keepdims=True) / w.sum()
        s = (ys * w * xc).sum(axis=1) / den
    s = np.where(np.isinf(samples).any(axis=1), np.nan, s)
    return estimate(slope, s, null=0.0)


# ---- verdicts ---------------------------------------------------------------------------------------------
def _tests(an: Analysis) -> list[tuple[str, str, Estimate]]:
    out = []
    for arm, res in an.arms.items():
        own_target = [("target", res.target)] if res.target is not None and res.target is not res.joint else []
        for key, est in [*res.rungs.items(), ("joint", res.joint), *own_target]:
            if est is not None:
                out.append((arm, key, est))
    return out


def verdicts(an: Analysis) -> None:
    tests = _tests(an)
    reject = holm([e.p for _, _, e in tests])
    equiv = [False] * len(tests)
    if an.margin:
        bound = math.log1p(an.margin)
        eq_p = []
        for _, _, e in tests:
            if e.samples is None or e.p is None:
                eq_p.append(None)
                continue
            logs = np.log(e.samples)
            n = len(logs)
            eq_p.append(min(1.0, max((np.sum(logs >= bound) + 1) / (n + 1), (np.sum(logs <= -bound) + 1) / (n + 1))))
        equiv = holm(eq_p)
    for (arm, key, est), rej, eq in zip(tests, reject, equiv):
        res = an.arms[arm]
        res.equivalent[key] = eq
        res.verdicts[key] = verdict(est, rej, eq, an.margin)
    for res in an.arms.values():
        if res.target is not None and res.target is res.joint and "joint" in res.verdicts:
            res.verdicts["target"], res.equivalent["target"] = res.verdicts["joint"], res.equivalent["joint"]
