"""Effective-compute multipliers from fitted laws: closed forms, vectorised over bootstrap
replicates (arrays of parameters), in log space so no compute overflows.

**At a rung, anchored.** The baseline's law, read along the path the rung's runs travel (more
compute, for L(C); more tokens at the rung's size N, for L(N, D)), is E_path + S·X^(−s): for L(C)
the floor is E and the slope α; for L(N, D) at the baseline's N the floor is E + A·N^(−α) and the
slope β. The compute the baseline needs to reach a loss L there is g(L) ∝ (L − floor)^(−1/s). The
multiplier of an arm at the rung is

    m = g(L_arm) / g(L_base) · C_base / C_arm,

L_arm and L_base the two arms' measured (geometric mean) losses at the rung, C their training
FLOPs: the baseline compute that reaches the arm's loss over the baseline compute that reached
the baseline's own loss, times the ratio of what the two runs cost. With a perfect law g(L_base) =
C_base and this is the unanchored C_base(L_arm)/C_arm; with a misfit at the rung (a bump both
arms share), the misfit cancels, because the law is only asked for the compute *ratio* between two
nearby losses. A is not needed at all. An arm below the baseline's floor has m = inf.

**At a target compute** there is no measurement to anchor on, so the arm's own law is read: for
L(C), the arm's L_a(C_t), and m = g_b(L_a(C_t)) / C_t; for L(N, D), each arm at its
compute-optimal size: with C = κ·N·D (κ the arm's FLOPs per parameter-token, measured),
N_opt = G·(C/κ)^(β/(α+β)), G = (αA/(βB))^(1/(α+β)), and L*(C) = E + K·(C/κ)^(−γ), γ = αβ/(α+β),
K = A·G^(−α) + B·G^β (Hoffmann et al. 2022, approach 3); m = C*_b(L*_a(C_t)) / C_t.
"""

from __future__ import annotations

import numpy as np


def _arr(x) -> np.ndarray:
    return np.asarray(x, float)


def log_anchored(floor, slope, loss_arm, loss_base, compute_arm, compute_base) -> np.ndarray:
    """log m at a rung (the module docstring); +inf where the arm is below the floor, NaN where
    the baseline's own loss is (the law cannot be read there)."""
    floor, slope, la, lb = _arr(floor), _arr(slope), _arr(loss_arm), _arr(loss_base)
    with np.errstate(all="ignore"):
        gap_a, gap_b = la - floor, lb - floor
        out = -(np.log(gap_a) - np.log(gap_b)) / slope + np.log(_arr(compute_base) / _arr(compute_arm))
        out = np.where(gap_a <= 0, np.inf, out)
        out = np.where((gap_b <= 0) | ~(slope > 0), np.nan, out)
    return out


def path_c(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Floor and slope of an L(C) law along compute: (E, α); theta (..., 3) = [e, a, α]."""
    return np.exp(theta[..., 0]), theta[..., 2]


def path_nd(theta: np.ndarray, n_params: float) -> tuple[np.ndarray, np.ndarray]:
    """Floor and slope of an L(N, D) law along tokens at size N: (E + A·N^(−α), β);
    theta (..., 5) = [e, a, b, α, β]."""
    with np.errstate(all="ignore"):
        floor = np.exp(theta[..., 0]) + np.exp(theta[..., 1] - theta[..., 3] * np.log(n_params))
    return floor, theta[..., 4]


def loss_c(theta: np.ndarray, log_c: float) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.exp(np.logaddexp(theta[..., 0], theta[..., 1] - theta[..., 2] * log_c))


def loss_nd(theta: np.ndarray, log_n: float, log_d: float) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.exp(
            np.logaddexp.reduce(
                np.stack([theta[..., 0], theta[..., 1] - theta[..., 3] * log_n, theta[..., 2] - theta[..., 4] * log_d]), axis=0
            )
        )


def log_compute_for_c(theta: np.ndarray, loss) -> np.ndarray:
    """log of the compute at which an L(C) law reaches `loss` (+inf at or below E)."""
    with np.errstate(all="ignore"):
        gap = _arr(loss) - np.exp(theta[..., 0])
        out = -(np.log(gap) - theta[..., 1]) / theta[..., 2]
        return np.where(gap <= 0, np.inf, out)


def optimal_nd(theta: np.ndarray, log_kappa) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The compute-optimal frontier of L(N, D) with C = κ·N·D: (log K, γ, log G), where
    L*(C) = E + K·(C/κ)^(−γ) and N_opt = G·(C/κ)^(β/(α+β))."""
    e, a, b, al, be = (theta[..., i] for i in range(5))
    with np.errstate(all="ignore"):
        log_g = (np.log(al) + a - np.log(be) - b) / (al + be)
        log_k = np.logaddexp(a - al * log_g, b + be * log_g)
        gamma = al * be / (al + be)
    return log_k, gamma, log_g


def optimal_loss_nd(theta: np.ndarray, log_kappa, log_c: float) -> np.ndarray:
    log_k, gamma, _ = optimal_nd(theta, log_kappa)
    with np.errstate(all="ignore"):
        return np.exp(np.logaddexp(theta[..., 0], log_k - gamma * (log_c - _arr(log_kappa))))


def log_optimal_n(theta: np.ndarray, log_kappa, log_c: float) -> np.ndarray:
    """log N_opt at compute C."""
    _, _, log_g = optimal_nd(theta, log_kappa)
    al, be = theta[..., 3], theta[..., 4]
    with np.errstate(all="ignore"):
        return log_g + be / (al + be) * (log_c - _arr(log_kappa))


def log_optimal_compute_for(theta: np.ndarray, log_kappa, loss) -> np.ndarray:
    """log of the compute at which L(N, D)'s compute-optimal frontier reaches `loss`."""
    log_k, gamma, _ = optimal_nd(theta, log_kappa)
    with np.errstate(all="ignore"):
        gap = _arr(loss) - np.exp(theta[..., 0])
        out = _arr(log_kappa) - (np.log(gap) - log_k) / gamma
        return np.where(gap <= 0, np.inf, out)


def log_target_c(theta_arm: np.ndarray, theta_base: np.ndarray, log_c: float) -> np.ndarray:
    """log m at a target compute for L(C) laws."""
    return log_compute_for_c(theta_base, loss_c(theta_arm, log_c)) - log_c


def log_target_nd(theta_arm: np.ndarray, theta_base: np.ndarray, log_kappa_arm, log_kappa_base, log_c: float) -> np.ndarray:
    """log m at a target compute for L(N, D) laws, each arm at its compute-optimal size."""
    return log_optimal_compute_for(theta_base, log_kappa_base, optimal_loss_nd(theta_arm, log_kappa_arm, log_c)) - log_c
