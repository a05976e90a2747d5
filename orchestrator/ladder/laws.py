"""Scaling laws and their fit: L = E + Σ_k A_k · X_k^(−α_k), numpy only.

Two forms, one code path:

- `L(C)  = E + A·C^(−α)`: one input, a run's training compute (one point per run);
- `L(N, D) = E + A·N^(−α) + B·D^(−β)`: parameters and tokens (Hoffmann et al. 2022, Chinchilla's
  approach 3), for ladders that read several points per run.

**The objective** is Chinchilla's and OLMo-core's: a Huber loss on log-loss residuals, the
prediction written as a log-sum-exp, log L̂ = LSE(e, a_k − α_k·log X_k) with E = e^e and A_k =
e^{a_k}, *summed* over the points (Marin PR #749: an averaged loss stops L-BFGS early), with
optional per-point weights (a point's residual is divided by its standard error before the Huber
loss: the ladder fits rung means whose noise falls with scale).

**The fit** is variable projection, then a local refinement (arXiv 2603.22339; Besiroglu et al.
2024 used a grid of starts): for each exponent vector on a grid, the linear terms (E, A_k) are a
non-negative least-squares problem in closed form; the best grid points seed a Levenberg–Marquardt
refinement of all parameters on the Huber objective (iteratively reweighted), batched over starts
with numpy, so a fit takes milliseconds and a bootstrap's thousands of refits run as one batch
(`refit`). Constraints are parametrisations, so no value can leave its range and no logarithm of
0 is ever taken: 0 < E < the lowest loss (E = E_max·sigmoid(v)), 0 < α_k < ALPHA_MAX.

A parameter that ends at a bound (E at 0 or at the lowest loss, an exponent at 0 or ALPHA_MAX)
is named in `Fit.at_bound`: the data do not pin it, and the ladder says so instead of giving it an
interval. Anything that cannot be fitted raises `NoFit` with the reason, never another error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

HUBER_DELTA = 1e-3
"""Chinchilla's δ on log-loss residuals (unweighted fits)."""
ALPHA_MAX = 3.0
"""Exponents are kept in (0, ALPHA_MAX)."""
BOUND_TOL = 1e-3
"""A parameter within this share of its range from a bound is at the bound."""
_NAMES = {1: ("A",), 2: ("A", "B")}
_EXPONENTS = {1: ("alpha",), 2: ("alpha", "beta")}


class NoFit(ValueError):
    """Why a law could not be fitted (said as the reason, never replaced by a number)."""


@dataclass(frozen=True)
class Law:
    """A fitted law: E + Σ_k A_k·X_k^(−α_k); `inputs` names the X_k ("C", or "N" and "D")."""

    inputs: tuple[str, ...]
    E: float
    A: tuple[float, ...]
    exponents: tuple[float, ...]
    objective: float = 0.0
    rmse: float = 0.0
    """Root mean square of the (unweighted) log-loss residuals."""
    at_bound: tuple[str, ...] = ()
    """Parameters the fit left at a bound (E at 0, E at the lowest loss, an exponent at a bound)."""

    @property
    def alpha(self) -> float:
        return self.exponents[0]

    @property
    def beta(self) -> float:
        return self.exponents[1] if len(self.exponents) > 1 else math.nan

    def loss(self, *x: float) -> float:
        """The law at inputs (C,) or (N, D)."""
        return self.E + sum(a * xi ** (-al) for a, al, xi in zip(self.A, self.exponents, x))

    def theta(self) -> np.ndarray:
        """[e, a_1..a_K, α_1..α_K] (log E, log A_k, exponents)."""
        return np.array([_log(self.E), *(_log(a) for a in self.A), *self.exponents], float)

    def to_dict(self) -> dict:
        out: dict = {"E": self.E}
        for name, a in zip(_NAMES[len(self.A)], self.A):
            out[name] = a
        for name, al in zip(_EXPONENTS[len(self.A)], self.exponents):
            out[name] = al
        out["rmse_log"] = self.rmse
        out["at_bound"] = list(self.at_bound)
        return out


def _log(x: float) -> float:
    return math.log(x) if x > 0 else -math.inf


# ---- the objective ------------------------------------------------------------------------------
def huber(r: np.ndarray, delta: float) -> np.ndarray:
    a = np.abs(r)
    return np.where(a <= delta, 0.5 * r * r, delta * (a - 0.5 * delta))


def predict_log(theta: np.ndarray, logx: np.ndarray) -> np.ndarray:
    """log L̂ for theta (..., 1 + 2K) at log inputs logx (n, K): shape (..., n)."""
    k = logx.shape[1]
    e = theta[..., :1]
    terms = [e + np.zeros(logx.shape[0])]
    for j in range(k):
        terms.append(theta[..., 1 + j : 2 + j] - theta[..., 1 + k + j : 2 + k + j] * logx[:, j])
    return np.logaddexp.reduce(np.stack(terms, axis=0), axis=0)


@dataclass
class _Batch:
    """A batch of fits of one form sharing the inputs `logx` (n, K): targets y (B, n), weights
    (B, n) or (n,), E_max (B,). Parameters in unconstrained coordinates z = [v, a_k, u_k]."""

    logx: np.ndarray
    y: np.ndarray
    w: np.ndarray
    e_max: np.ndarray
    delta: float

    @property
    def k(self) -> int:
        return self.logx.shape[1]

    def take(self, rows: np.ndarray) -> _Batch:
        w = self.w[rows] if self.w.ndim == 2 else self.w
        return _Batch(self.logx, self.y[rows], w, self.e_max[rows], self.delta)

    def natural(self, z: np.ndarray) -> np.ndarray:
        k = self.k
        theta = z.copy()
        theta[:, 0] = np.log(self.e_max) + _log_sigmoid(z[:, 0])
        theta[:, 1 + k :] = ALPHA_MAX * _sigmoid(z[:, 1 + k :])
        return theta

    def unconstrained(self, theta: np.ndarray) -> np.ndarray:
        k = self.k
        z = np.array(theta, float, copy=True)
        share = np.clip(np.exp(theta[:, 0] - np.log(self.e_max)), 1e-12, 1 - 1e-12)
        z[:, 0] = np.log(share) - np.log1p(-share)
        al = np.clip(theta[:, 1 + k :] / ALPHA_MAX, 1e-9, 1 - 1e-9)
        z[:, 1 + k :] = np.log(al) - np.log1p(-al)
        return z

    def residuals(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Weighted residuals (B, n) and their Jacobian (B, n, P) with respect to z. Written out
        term by term (no stacked (B, n, 1 + K) array): the loop of every fit runs it once per
        iteration, and at a bootstrap's sizes numpy's per-call cost is most of it."""
        k, lx, theta = self.k, self.logx.T, self.natural(z)  # lx: (K, n)
        log_e = theta[:, :1]  # (B, 1)
        terms = [theta[:, 1 + j : 2 + j] - theta[:, 1 + k + j : 2 + k + j] * lx[j] for j in range(k)]  # log A_k - α_k log X_k
        pred = np.logaddexp(log_e, terms[0])
        for term in terms[1:]:
            pred = np.logaddexp(pred, term)
        sw = np.sqrt(self.w)
        r = (pred - self.y) * sw
        jac = np.empty((len(z), lx.shape[1], 1 + 2 * k))
        jac[..., 0] = np.exp(log_e - pred) * (1.0 - _sigmoid(z[:, :1]))  # each term's share of the prediction, times its chain rule
        for j, term in enumerate(terms):
            share = np.exp(term - pred)
            s = _sigmoid(z[:, 1 + k + j : 2 + k + j])  # the exponent's share of ALPHA_MAX
            jac[..., 1 + j] = share
            jac[..., 1 + k + j] = -share * lx[j] * ALPHA_MAX * s * (1.0 - s)
        jac *= np.broadcast_to(sw, r.shape)[..., None]
        return r, jac

    def cost(self, r: np.ndarray) -> np.ndarray:
        return huber(r, self.delta).sum(axis=-1)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def _log_sigmoid(x: np.ndarray) -> np.ndarray:
    return -np.logaddexp(0.0, -x)


def solve(batch, z: np.ndarray, iterations: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """Levenberg–Marquardt on the Huber objective (iteratively reweighted least squares), each
    row of the batch with its own damping; a row stops when a step no longer improves its cost
    by more than 1e-12 of it, and only the rows still moving are computed. `batch` gives
    `take(rows)` (the sub-batch of those rows), `residuals(z) -> (r (B, n), jac (B, n, P))`,
    `cost(r) -> (B,)` and `delta`."""
    z = np.array(z, float, copy=True)
    with np.errstate(all="ignore"):
        r, jac = batch.residuals(z)
        cost = batch.cost(r)
        lam = np.full(len(z), 1e-3)
        live = np.flatnonzero(np.isfinite(cost))
        eye = np.eye(z.shape[1])
        tiny = 1e-12 * eye
        for _ in range(iterations):
            if not len(live):
                break
            sub = batch.take(live)
            rl, jl, lam_l = r[live], jac[live], lam[live]
            a = np.abs(rl)
            irls = np.where(a <= batch.delta, 1.0, batch.delta / np.maximum(a, 1e-300))
            jw = jl * irls[..., None]
            h = np.einsum("bnp,bnq->bpq", jw, jl)
            g = np.einsum("bnp,bn->bp", jw, rl)
            damp = lam_l[:, None, None] * (h * eye + tiny)
            try:
                step = np.linalg.solve(h + damp, -g[..., None])[..., 0]
            except np.linalg.LinAlgError:
                step = np.stack([_lstsq(hh + dd, -gg) for hh, dd, gg in zip(h, damp, g)])
            step = np.where(np.isfinite(step), step, 0.0)
            z_new = z[live] + step
            r_new, jac_new = sub.residuals(z_new)
            cost_new = sub.cost(r_new)
            old = cost[live]
            better = np.isfinite(cost_new) & (cost_new < old)
            acc = live[better]
            z[acc], r[acc], jac[acc], cost[acc] = z_new[better], r_new[better], jac_new[better], cost_new[better]
            lam_l = np.where(better, np.maximum(lam_l / 3.0, 1e-12), lam_l * 4.0)
            lam[live] = lam_l
            converged = better & (old - cost_new <= 1e-12 * np.maximum(old, 1e-30))
            live = live[~converged & (lam_l < 1e10)]
    return z, cost


def _lstsq(h: np.ndarray, g: np.ndarray) -> np.ndarray:
    return np.linalg.lstsq(h, g, rcond=None)[0]


# ---- variable projection starts ---------------------------------------------------------------------
def _grid(k: int) -> np.ndarray:
    """Exponent vectors to project over: 48 values for one input, 24 x 24 for two."""
    if k == 1:
        return np.geomspace(0.01, 0.95 * ALPHA_MAX, 48)[:, None]
    side = np.geomspace(0.02, 2.0, 24)
    return np.array([(a, b) for a in side for b in side])


def _nnls(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares for small problems (scipy's, imported where used: scipy is heavy)."""
    from scipy.optimize import nnls

    try:
        return nnls(x, y, maxiter=50 * x.shape[1])[0]
    except RuntimeError:
        return np.zeros(x.shape[1])


def _projection_starts(logx: np.ndarray, y: np.ndarray, w: np.ndarray, e_max: float, keep: int) -> np.ndarray:
    """For each exponent vector on the grid, E and A_k ≥ 0 in closed form (non-negative least
    squares on L with each point scaled by sqrt(w)/L, so it approximates the log residual), scored
    by the Huber objective; the `keep` best as theta rows."""
    loss = np.exp(y)
    scale = np.sqrt(w) / loss
    cands = []
    for expo in _grid(logx.shape[1]):
        cols = [np.ones_like(loss)] + [np.exp(-a * logx[:, j]) for j, a in enumerate(expo)]
        design = np.stack(cols, axis=1) * scale[:, None]
        coef = _nnls(design, loss * scale)
        e = min(max(coef[0], 1e-9 * e_max), (1 - 1e-6) * e_max)
        a = np.maximum(coef[1:], 1e-300)
        cands.append(np.concatenate([[math.log(e)], np.log(a), expo]))
    theta = np.array(cands)
    with np.errstate(all="ignore"):
        cost = huber((predict_log(theta, logx) - y) * np.sqrt(w), _delta_for(w)).sum(axis=1)
    cost = np.where(np.isfinite(cost), cost, np.inf)
    return theta[np.argsort(cost)[:keep]]


def _delta_for(w: np.ndarray) -> float:
    return HUBER_DELTA


# ---- the public fit ------------------------------------------------------------------------------
@dataclass
class Data:
    """Points of one law fit: log inputs (n, K), log losses (n,), weights (n,)."""

    logx: np.ndarray
    y: np.ndarray
    w: np.ndarray = field(default_factory=lambda: np.ones(0))
    delta: float = HUBER_DELTA

    @staticmethod
    def of(inputs: list[list[float]] | np.ndarray, loss: list[float] | np.ndarray, weights=None, delta: float = HUBER_DELTA) -> Data:
        """From raw inputs (n, K) (compute, or parameters and tokens) and losses; NoFit for what
        cannot be fitted (too few points, non-finite or non-positive values)."""
        x = np.asarray(inputs, float)
        if x.ndim == 1:
            x = x[:, None]
        loss_a = np.asarray(loss, float)
        w = np.ones(len(loss_a)) if weights is None else np.asarray(weights, float)
        if x.shape[0] != len(loss_a) or len(w) != len(loss_a):
            raise NoFit("inputs, losses and weights differ in length")
        ok = np.all(np.isfinite(x) & (x > 0), axis=1) & np.isfinite(loss_a) & (loss_a > 0) & np.isfinite(w) & (w > 0)
        x, loss_a, w = x[ok], loss_a[ok], w[ok]
        k = x.shape[1]
        need = 1 + 2 * k
        distinct = len({tuple(row) for row in np.round(np.log(x), 12).tolist()}) if len(x) else 0
        if distinct < need:
            raise NoFit(f"{distinct} distinct point(s) with finite, positive values; a fit of {need} parameters needs {need}")
        return Data(np.log(x), np.log(loss_a), w, delta)

    @property
    def e_max(self) -> float:
        """E stays below the lowest loss."""
        return float(np.exp(np.min(self.y)))


def fit(data: Data, *, inputs: tuple[str, ...] | None = None, keep: int = 8) -> Law:
    """The law of least Huber objective (variable projection, then refinement); NoFit otherwise."""
    k = data.logx.shape[1]
    names = inputs or (("C",) if k == 1 else ("N", "D"))
    try:
        starts = _projection_starts(data.logx, data.y, data.w, data.e_max, keep)
        batch = _Batch(data.logx, np.broadcast_to(data.y, (len(starts), len(data.y))), data.w, np.full(len(starts), data.e_max), data.delta)
        z, cost = solve(batch, batch.unconstrained(starts))
    except (FloatingPointError, OverflowError, ValueError, ZeroDivisionError, np.linalg.LinAlgError) as err:
        raise NoFit(f"the optimiser failed ({type(err).__name__}: {err})") from None
    if not np.any(np.isfinite(cost)):
        raise NoFit("the optimiser found no finite fit")
    best = int(np.nanargmin(np.where(np.isfinite(cost), cost, np.inf)))
    theta = batch.natural(z)[best]
    return law_of(theta, names, data, float(cost[best]))


def law_of(theta: np.ndarray, names: tuple[str, ...], data: Data, objective: float) -> Law:
    k = len(names)
    if not np.all(np.isfinite(theta[1:])):
        raise NoFit("the fit is not finite")
    with np.errstate(all="ignore"):
        rmse = float(np.sqrt(np.mean((predict_log(theta, data.logx) - data.y) ** 2)))
    E = float(np.exp(theta[0]))
    exps = tuple(float(a) for a in theta[1 + k :])
    return Law(names, E, tuple(float(np.exp(a)) for a in theta[1 : 1 + k]), exps, objective, rmse, _at_bound(E, data.e_max, exps, names))


def _at_bound(E: float, e_max: float, exps: tuple[float, ...], names: tuple[str, ...]) -> tuple[str, ...]:
    out = []
    if BOUND_TOL * e_max > E:
        out.append("E at 0")
    elif (1 - BOUND_TOL) * e_max < E:
        out.append("E at the lowest loss")
    for name, a in zip(_EXPONENTS[len(names)], exps):
        if a < BOUND_TOL * ALPHA_MAX or a > (1 - BOUND_TOL) * ALPHA_MAX:
            out.append(f"{name} at its bound ({a:.3g})")
    return tuple(out)


def refit(law: Law, data: Data, y: np.ndarray) -> np.ndarray:
    """Many refits at once: the same inputs and weights, targets `y` (B, n) (log losses), each
    started at `law`. Returns theta (B, 1 + 2K); rows that could not be fitted are NaN."""
    y = np.asarray(y, float)
    with np.errstate(all="ignore"):  # a replicate drawn out of range fails alone (its row is NaN)
        e_max = np.exp(np.min(y, axis=1))
        batch = _Batch(data.logx, y, data.w, e_max, data.delta)
        start = np.broadcast_to(law.theta(), (len(y), 1 + 2 * data.logx.shape[1])).copy()
        start[:, 0] = np.minimum(start[:, 0], np.log(e_max) - 1e-6)
        start[:, 0] = np.where(np.isfinite(start[:, 0]), start[:, 0], np.log(e_max) - 20.0)
        z, cost = solve(batch, batch.unconstrained(start))
        theta = batch.natural(z)
    bad = ~np.isfinite(cost) | ~np.all(np.isfinite(theta), axis=1)
    theta[bad] = np.nan
    return theta
