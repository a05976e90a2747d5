"""A ladder's answers for one metric: each arm's law, its multipliers against the baseline at every
rung (anchored), over all rungs at once (the joint fit) and at a target compute, the rollout check,
and the verdicts with their family-wise control.

- **Laws per arm**, so one arm's failure stays its own: L(C) on the final cells, or L(N, D) on
  every cell when the runs read several points each (`laws`).
- **Multipliers**: `multipliers` (anchored at a rung; at the target, compute-optimal for L(N, D)).
- **Joint**: every arm's final cells fitted as one curve with shared E, A and α and one
  log-multiplier per arm — the headline when the arms' exponents are not distinguishable (their
  difference's interval holds 0), since it uses every rung at once.
- **Intervals**: percentiles of the paired, per-rung bootstrap (`cells`), every law refitted in
  each replicate; nothing measured from a single seed gets one.
- **Rollout**: each arm fitted on every rung but its largest predicts that rung's loss; a measured
  loss outside the prediction's interval (the difference's 95% interval excludes 0) says the law
  does not extrapolate here, and the report says so beside the target multiplier.
- **Verdicts**: `helps`/`hurts` when Holm's procedure over every (arm, rung | joint | target) test of
  m = 1 in the ladder rejects at 5% family-wise; `no practical difference` when an equivalence
  margin is given and Holm over the equivalence tests (two one-sided, |log m| < log(1 + margin))
  rejects; `too wide to decide` when the interval spans more than `WIDE`x; else `undecided`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from . import multipliers as mx
from .answers import ONE_SEED, REPLICATES, Analysis, ArmResult
from .cells import Cell, Estimate, build_cells, draw, estimate, noise_trend
from .checks import joint, rollout, verdicts
from .context import Ctx
from .laws import NoFit
from .runs import Run


def analyse(
    runs: Sequence[Run],
    baseline: str,
    *,
    metric: str = "val_loss",
    target: float = math.nan,
    margin: float | None = None,
    replicates: int = REPLICATES,
    seed: int = 0,
    rungs: Sequence[str] | None = None,
    form: str = "auto",
) -> Analysis:
    """Everything the module docstring lists; never raises for data it is given (a part that
    cannot be computed says why in `no_fit`, an estimate's `note` or `notes`). Floating-point
    overflow is an answer here (an infinite multiplier, a failed replicate), not a warning."""
    with np.errstate(all="ignore"):
        return _analyse(runs, baseline, metric, target, margin, replicates, seed, rungs, form)


def _analyse(runs, baseline, metric, target, margin, replicates, seed, rungs, form) -> Analysis:
    notes: list[str] = []
    good = [r for r in runs if math.isfinite(r.loss) and r.loss > 0 and math.isfinite(r.compute) and r.compute > 0]
    bad = len(runs) - len(good)
    if bad:
        where = sorted({f"{r.arm} at {r.rung}" for r in runs if r not in good})
        notes.append(
            f"{bad} run(s) with a non-finite {metric} or compute left out ({', '.join(where[:6])}{', …' if len(where) > 6 else ''})"
        )
    cells = build_cells(good)
    arm_names = list(dict.fromkeys(r.arm for r in runs))
    order = _rung_order(cells, baseline, rungs)
    chosen = _form(good, form)
    noise = noise_trend([c for c in cells if c.final] if chosen == "L(C)" else cells)
    ctx = Ctx(cells, noise, chosen, order, baseline)
    analysis = Analysis(
        metric, chosen, baseline, order, {a: ArmResult(a) for a in arm_names}, target, margin, replicates,
        min((c.n for c in cells), default=0), noise, _compute(cells), _loss(cells), notes=notes, cells=cells,
    )  # fmt: skip
    if analysis.seeds == 1:
        notes.append("some cells have one seed: nothing measured from them gets an interval or a verdict (2 seeds at least)")
    if baseline not in arm_names or not any(c.arm == baseline for c in cells):
        for res in analysis.arms.values():
            res.no_fit = f"no finished runs of the baseline arm {baseline!r}"
        return analysis
    for arm in arm_names:
        res = analysis.arms[arm]
        try:
            res.law = ctx.fit_law(ctx.arm_cells(arm), arm)
        except NoFit as err:
            res.no_fit = str(err)
    fitted = [(r.law, ctx.arm_cells(a)) for a, r in analysis.arms.items() if r.law is not None]
    rng = np.random.default_rng(seed)
    ctx.noise_draws = draw(cells, replicates, rng)
    analysis.misfit = ctx.misfit(fitted)
    ctx.draws = draw(cells, replicates, rng, analysis.misfit)
    for arm in arm_names:
        _fit_arm(ctx, analysis.arms[arm])
    base = analysis.arms[baseline]
    for arm, res in analysis.arms.items():
        if arm != baseline:
            _rung_multipliers(ctx, res, base)
            _exponent_gap(ctx, res, base)
        rollout(ctx, res)
    joint(ctx, analysis)
    for arm, res in analysis.arms.items():
        if arm != baseline:
            analysis.headline[arm] = headline(res)
            _target(ctx, analysis, res, base, analysis.headline[arm])
    verdicts(analysis)
    return analysis


def _rung_order(cells: list[Cell], baseline: str, given: Sequence[str] | None) -> list[str]:
    names = list(dict.fromkeys(c.rung for c in cells))
    if given:
        return [r for r in given if r in names] + [r for r in names if r not in given]
    base = {c.rung: c.compute for c in cells if c.arm == baseline and c.final}
    anyc: dict[str, float] = {}
    for c in cells:
        if c.final:
            anyc[c.rung] = min(anyc.get(c.rung, math.inf), c.compute)
    return sorted(names, key=lambda r: (base.get(r, anyc.get(r, math.inf)), r))


def _form(runs: Sequence[Run], form: str) -> str:
    if form in ("L(C)", "L(N, D)"):
        return form
    several = bool(runs) and all(len(r.points) >= 1 for r in runs)
    sized = all(math.isfinite(r.params) and math.isfinite(r.tokens) and r.params > 0 and r.tokens > 0 for r in runs)
    return "L(N, D)" if several and sized else "L(C)"


def _compute(cells: list[Cell]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for c in cells:
        if c.final:
            out.setdefault(c.arm, {})[c.rung] = c.compute
    return out


def _loss(cells: list[Cell]) -> dict[str, dict[str, tuple[float, int]]]:
    out: dict[str, dict[str, tuple[float, int]]] = {}
    for c in cells:
        if c.final:
            out.setdefault(c.arm, {})[c.rung] = (c.loss, c.n)
    return out


# ---- per arm ---------------------------------------------------------------------------------------
def _fit_arm(ctx: Ctx, res: ArmResult) -> None:
    """The arm's law in every replicate, and its parameters' intervals."""
    if res.law is None:
        return
    res.samples = ctx.refit_law(res.law, ctx.arm_cells(res.arm))
    law, s = res.law, res.samples
    k = len(law.inputs)
    names = ["E", "alpha"] + (["beta"] if k == 2 else [])
    values = [law.E, law.alpha] + ([law.beta] if k == 2 else [])
    cols = [None, 1 + k] + ([2 + k] if k == 2 else [])
    for name, value, col in zip(names, values, cols):
        bounded = [b for b in law.at_bound if b.startswith(name + " ") or (name == "E" and b.startswith("E "))]
        if bounded:
            shown = 0.0 if bounded[0] == "E at 0" else value  # a fitted 1e-40 means 0: the bound, not a measurement
            res.params[name] = Estimate(shown, note=f"{bounded[0]}: not pinned by these rungs, no interval")
            continue
        if s is None:
            res.params[name] = Estimate(value, note=ONE_SEED)
            continue
        res.params[name] = estimate(value, np.exp(s[:, 0]) if col is None else s[:, col])
    if k == 2:
        gamma = law.alpha * law.beta / (law.alpha + law.beta)
        res.params["gamma"] = estimate(gamma, None if s is None else s[:, 3] * s[:, 4] / (s[:, 3] + s[:, 4]))
        if s is None:
            res.params["gamma"].note = ONE_SEED


def _path(ctx: Ctx, theta: np.ndarray, base_cell: Cell) -> tuple[np.ndarray, np.ndarray]:
    return mx.path_c(theta) if ctx.form == "L(C)" else mx.path_nd(theta, base_cell.params)


def _rung_multipliers(ctx: Ctx, res: ArmResult, base: ArmResult) -> None:
    for rung in ctx.rungs:
        ja, jb = ctx.final.get((res.arm, rung)), ctx.final.get((ctx.baseline, rung))
        if ja is None or jb is None:
            continue
        ca, cb = ctx.cells[ja], ctx.cells[jb]
        if base.law is None:
            res.rungs[rung] = Estimate(math.nan, note=f"no baseline law ({base.no_fit})")
            continue
        floor, slope = _path(ctx, base.law.theta(), cb)
        value = float(np.exp(mx.log_anchored(floor, slope, ca.loss, cb.loss, ca.compute, cb.compute)))
        if ca.n < 2 or cb.n < 2 or base.samples is None:
            res.rungs[rung] = Estimate(value, note=ONE_SEED)
            continue
        floor_s, slope_s = _path(ctx, base.samples, cb)
        moved = ctx.draws.moved
        logm = mx.log_anchored(floor_s, slope_s, np.exp(moved[:, ja]), np.exp(moved[:, jb]), ca.compute, cb.compute)
        res.rung_samples[rung] = logm
        with np.errstate(over="ignore"):
            res.rungs[rung] = estimate(value, np.exp(logm), null=1.0)


def _kappa(ctx: Ctx, arm: str) -> float:
    vals = [c.compute / (c.params * c.tokens) for c in ctx.cells if c.arm == arm and c.final and c.params > 0 and c.tokens > 0]
    return math.log(float(np.mean(vals))) if vals else math.nan


def headline(res: ArmResult) -> str:
    """ "joint" when the multiplier does not change with scale within the noise (its trend's
    interval holds 0) and there is a joint multiplier; "per rung" otherwise."""
    t, j = res.trend, res.joint
    changes = t is not None and t.p is not None and t.p < 0.05
    return "per rung" if changes or j is None or not math.isfinite(j.value) else "joint"


def _target(ctx: Ctx, an: Analysis, res: ArmResult, base: ArmResult, head: str) -> None:
    """At the target compute: the joint multiplier when the exponents agree (one curve shifted in
    compute is worth the same factor at any scale), else each arm's own law extrapolated."""
    if not math.isfinite(an.target) or an.target <= 0:
        return
    res.target_from = "joint fit" if head == "joint" else "each arm's own law"
    if res.law is None or base.law is None:
        res.target = res.joint if head == "joint" else Estimate(math.nan, note=f"no law: {res.no_fit or base.no_fit}")
        return
    log_c = math.log(an.target)
    if ctx.form == "L(C)":
        f = lambda ta, tb: mx.log_target_c(ta, tb, log_c)
    else:
        ka, kb = _kappa(ctx, res.arm), _kappa(ctx, ctx.baseline)
        f = lambda ta, tb: mx.log_target_nd(ta, tb, ka, kb, log_c)
        res.optimal_n = estimate(
            float(np.exp(mx.log_optimal_n(res.law.theta(), ka, log_c))),
            None if res.samples is None else np.exp(mx.log_optimal_n(res.samples, ka, log_c)),
            note="" if res.samples is not None else ONE_SEED,
        )
    if head == "joint":
        res.target = res.joint
        return
    with np.errstate(all="ignore"):
        value = float(np.exp(f(res.law.theta(), base.law.theta())))
        if res.samples is None or base.samples is None:
            res.target = Estimate(value, note=ONE_SEED)
            return
        res.target = estimate(value, np.exp(f(res.samples, base.samples)), null=1.0)


def _exponent(theta: np.ndarray, form: str) -> np.ndarray:
    if form == "L(C)":
        return theta[..., 2]
    return theta[..., 3] * theta[..., 4] / (theta[..., 3] + theta[..., 4])


def _exponent_gap(ctx: Ctx, res: ArmResult, base: ArmResult) -> None:
    if res.law is None or base.law is None:
        return
    value = float(_exponent(res.law.theta(), ctx.form) - _exponent(base.law.theta(), ctx.form))
    if res.samples is None or base.samples is None:
        res.exponent_gap = Estimate(value, note=ONE_SEED)
        return
    res.exponent_gap = estimate(value, _exponent(res.samples, ctx.form) - _exponent(base.samples, ctx.form), null=0.0)
