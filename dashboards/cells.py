"""Cells every rendering of a `Comparison` shares (tables_*.py, html.py): axis headers, mean ± std,
confidence intervals, deltas, p values, state counts and the header lines."""

from __future__ import annotations

from .comparison import Comparison
from .metrics import FIRST_TOKEN, decimals, fmt
from .records import GATE_AXIS
from .seedstats import Delta, Stat

DASH = "–"


def axis_headers(axes: list[str]) -> dict[str, str]:
    """Short axis names (`gate`, `lr`); the full path where two axes share a last part."""
    leaves = [("gate" if p == GATE_AXIS else p.rsplit(".", 1)[-1]) for p in axes]
    return {p: (leaf if leaves.count(leaf) == 1 else p) for p, leaf in zip(axes, leaves)}


def mean_std(stat: Stat, sep: str = " ± ") -> str:
    if stat.mean is None:
        return DASH
    d = decimals(stat.mean)
    return fmt(stat.mean, d) if stat.std is None else f"{fmt(stat.mean, d)}{sep}{fmt(stat.std, d)}"


def ci_text(stat: Stat) -> str:
    if stat.mean is None or stat.ci95 is None:
        return DASH
    d = decimals(stat.mean)
    return f"[{fmt(stat.lo, d)}, {fmt(stat.hi, d)}]"


def p_text(p: float | None) -> str:
    if p is None:
        return DASH
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def delta_text(delta: Delta | None, base: Stat | None, *, relative: bool = True) -> str:
    if delta is None:
        return DASH
    d = decimals(base.mean) if base is not None and base.mean is not None else decimals(delta.diff)
    text = f"{delta.diff:+,.0f}" if d == 0 else f"{delta.diff:+.{d}f}"
    if relative and delta.rel is not None:
        text += f" ({delta.rel:+.1f}%)"
    return text


def status_counts(comp: Comparison) -> str:
    return ", ".join(f"{n} {s}" for s, n in comp.state_counts().items()) or "no runs"


def header_lines(comp: Comparison) -> list[str]:
    s = comp.sweep
    lines = [
        f"sweep {s.name}: {status_counts(comp)}; experiment {s.experiment!r}, parent run {s.parent.run_id}"
        + (f" (newest of {s.launches} launches)" if s.launches > 1 else "")
    ]
    seeds = ", ".join(comp.seed_axes) or "none (one run per configuration)"
    lines.append(f"rows: configurations; seeds grouped over {seeds}. Values: mean ± std over finished seeds (n); final values of each run.")
    if comp.has_baseline:
        lines.append("Δ: against the gate-`none` row with the other axes equal; p: paired t-test over matching seeds.")
    if comp.uniform_first_token is not None and any(m.key == FIRST_TOKEN for m in comp.metrics):
        lines.append(f"{FIRST_TOKEN} under uniform attention: {comp.uniform_first_token:.3f}.")
    return lines
