"""The shared state of one analysis: the cells, their bootstrap, and a law fitted on any of them."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .cells import Cell, Draws, Noise
from .laws import Data, Law, NoFit, fit, predict_log, refit

FIT_DELTA = 2.0
"""Huber δ of the ladder's weighted fits, in standard errors of a cell's mean."""


class Ctx:
    """What every step of an analysis reads: the cells, their bootstrap, their columns."""

    def __init__(self, cells: list[Cell], noise: Noise, form: str, rungs: list[str], baseline: str):
        self.cells, self.noise, self.form, self.rungs, self.baseline = cells, noise, form, rungs, baseline
        self.draws: Draws | None = None
        """The bootstrap (set once the point fits have measured the laws' lack of fit)."""
        self.noise_draws: Draws | None = None
        """The bootstrap of the seeds' noise alone (what the lack of fit and the rollout check are judged against)."""
        self.col = {(c.arm, c.rung, c.index): j for j, c in enumerate(cells)}
        self.final = {(c.arm, c.rung): j for j, c in enumerate(cells) if c.final}

    def compute_at(self, rung: str) -> float:
        """The baseline's training FLOPs at a rung (any arm's when the baseline has none there)."""
        j = self.final.get((self.baseline, rung))
        if j is None:
            j = next(k for (a, r), k in self.final.items() if r == rung)
        return self.cells[j].compute

    def arm_cells(self, arm: str, rungs: Sequence[str] | None = None, final_only: bool = False) -> list[int]:
        return [
            j
            for j, c in enumerate(self.cells)
            if c.arm == arm and (rungs is None or c.rung in rungs) and (c.final or (not final_only and self.form == "L(N, D)"))
        ]

    def log_inputs(self, cols: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Log inputs (n, K) and log mean losses of these cells, unchecked (for predictions)."""
        cs = [self.cells[j] for j in cols]
        x = [[c.compute] for c in cs] if self.form == "L(C)" else [[c.params, c.tokens] for c in cs]
        with np.errstate(all="ignore"):
            return np.log(np.asarray(x, float)), np.array([c.mean_log for c in cs])

    def data(self, cols: list[int]) -> Data:
        cs = [self.cells[j] for j in cols]
        inputs = [[c.compute] for c in cs] if self.form == "L(C)" else [[c.params, c.tokens] for c in cs]
        return Data.of(inputs, [c.loss for c in cs], [self.noise.weight(c) for c in cs], FIT_DELTA)

    def fit_law(self, cols: list[int], what: str) -> Law:
        """A law on these cells; NoFit with the reason."""
        n_rungs = len({self.cells[j].rung for j in cols})
        if n_rungs < 3:
            raise NoFit(f"{what}: finished runs at {n_rungs} rung(s); a fit needs 3")
        return fit(self.data(cols), inputs=("C",) if self.form == "L(C)" else ("N", "D"))

    def refit_law(self, law: Law, cols: list[int], *, noise_only: bool = False) -> np.ndarray | None:
        """The law refitted in every replicate (None when no cell moves: one seed); with
        `noise_only`, in the replicates of the seeds' noise alone."""
        draws = self.noise_draws if noise_only else self.draws
        assert draws is not None
        if not draws.movable[cols].any():
            return None
        return refit(law, self.data(cols), draws.moved[:, cols])

    def misfit(self, fits: list[tuple[Law, list[int]]], replicates: int = 200) -> tuple[float, int]:
        """The laws' lack of fit beyond the seeds' noise, as the variance of an effect per rung
        shared by the arms (in log loss), and its degrees of freedom. Measured by leaving each
        interior rung out of each arm's fit and predicting it from the others: the squared errors
        of those predictions less what the seeds' noise alone gives them (a noise-only bootstrap).
        In-sample residuals cannot show it: with a few rungs a three-parameter law bends to absorb
        a bump at one rung, and the bend is what moves every multiplier. (0, 0) when no arm has an
        interior rung to leave out with three rungs left (a lack of fit is then not measurable)."""
        assert self.noise_draws is not None
        moved = self.noise_draws.moved[:replicates]
        excess, count = 0.0, 0
        for law, cols in fits:
            rungs = [r for r in self.rungs if any(self.cells[j].rung == r for j in cols)]
            for rung in rungs:
                keep = [j for j in cols if self.cells[j].rung != rung]
                left = [j for j in cols if self.cells[j].rung == rung]
                if len({self.cells[j].rung for j in keep}) < 3:
                    continue
                try:
                    data = self.data(keep)
                    loo = fit(data, inputs=law.inputs)
                except NoFit:
                    continue
                logx, y = self.log_inputs(left)
                err = predict_log(loo.theta(), logx) - y
                with np.errstate(all="ignore"):
                    theta = refit(loo, data, moved[:, keep])
                    spread = np.nanvar(predict_log(theta, logx) - moved[:, left], axis=0)
                ok = np.isfinite(err) & np.isfinite(spread)
                excess += float(np.sum(err[ok] ** 2 - spread[ok]))
                count += int(ok.sum())
        return (max(0.0, excess / count), count) if count else (0.0, 0)
