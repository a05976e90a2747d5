"""Shared helpers for the benchmark scripts: interleaved timing and ratio tables.

Machines are shared and noisy, so every benchmark times its variants in alternating rounds inside
one process and reports the median of per-round ratios against the reference variant. Absolute
times are printed for context only.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def interleaved(variants: dict[str, Callable[[], None]], *, rounds: int, reps: int, warmup: int = 2) -> dict[str, list[float]]:
    """Seconds per call of each variant, one entry per round; variants alternate every round
    (and their order rotates) so that drifts in machine load hit all of them alike."""
    for fn in variants.values():
        for _ in range(warmup):
            fn()
    names = list(variants)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            fn = variants[name]
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            times[name].append((time.perf_counter() - t0) / reps)
    return times


def ratios(times: dict[str, list[float]], reference: str) -> dict[str, float]:
    """Median over rounds of (variant time / reference time in the same round)."""
    ref = times[reference]
    return {name: statistics.median(t / r for t, r in zip(ts, ref)) for name, ts in times.items()}


def table(rows: list[dict], columns: list[str]) -> str:
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in columns}
    line = "  ".join(c.ljust(widths[c]) for c in columns)
    out = [line, "  ".join("-" * widths[c] for c in columns)]
    for r in rows:
        out.append("  ".join(str(r.get(c, "")).ljust(widths[c]) for c in columns))
    return "\n".join(out)


def result(name: str, value: float, goal: str, ok: bool, unit: str = "", note: str = "") -> None:
    """One machine-readable line per measured figure; `run_all.py` collects them into a table."""
    import json

    print("RESULT " + json.dumps({"name": name, "value": value, "unit": unit, "goal": goal, "ok": ok, "note": note}), flush=True)
