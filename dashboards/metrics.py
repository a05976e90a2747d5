"""The report's metric columns: which MLflow metrics, in what order, which way is better, and how
their numbers are printed.

The default columns are the paper's (REFERENCE §2-§3, Tables 1, 4 and 5): perplexity, MMLU,
first-token attention (F-Attn), Gu et al.'s sink ratio, massive activations (M-Act), the mean
gate score, loss spikes, throughput, and RULER averages per context length when a run has them.
A column appears only when at least one run of the sweep logged it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterable, Literal

Direction = Literal["min", "max"] | None

DEFAULT_METRICS = ("val_ppl", "mmlu_acc", "first_token_attn", "sink_ratio", "max_activation", "gate_score_mean",
                   "loss_spikes", "tokens_per_s")
RULER_PREFIX = "ruler_avg/"
BIGRAM_METRICS = ("val_loss", "bbc/trigger_loss", "value_norm_bos_ratio")

#: metric -> (short label for the terminal, better direction; None: no better side, e.g. the gate score)
KNOWN: dict[str, tuple[str, Direction]] = {
    "val_loss": ("loss", "min"),
    "val_ppl": ("PPL", "min"),
    "val_bpb": ("bpb", "min"),
    "mmlu_acc": ("MMLU", "max"),
    "first_token_attn": ("F-Attn", "min"),
    "sink_ratio": ("sink", "min"),
    "max_activation": ("M-Act", "min"),
    "gate_score_mean": ("gate-score", None),
    "loss_spikes": ("spikes", "min"),
    "tokens_per_s": ("tok/s", "max"),
    "value_norm_bos_ratio": ("v-BOS", None),
    "bbc/copy_acc": ("copy", "max"),
    "bbc/trigger_loss": ("trig.loss", "min"),
}


@dataclass(frozen=True)
class MetricSpec:
    """One metric column."""

    key: str
    """The MLflow metric key (its final value is the run's value)."""
    label: str
    """Short header for the terminal table."""
    better: Direction
    """`min` or `max` marks the best row of the column; None marks nothing."""


def spec(key: str) -> MetricSpec:
    """The column of a metric key; unknown keys get their own name and no better side, except
    RULER averages (higher is better) and accuracies."""
    if key in KNOWN:
        label, better = KNOWN[key]
        return MetricSpec(key, label, better)
    if key.startswith(RULER_PREFIX):
        return MetricSpec(key, f"RULER {_length_label(key[len(RULER_PREFIX):])}", "max")
    if key.endswith("acc") or key.endswith("accuracy"):
        return MetricSpec(key, key.rsplit("/", 1)[-1], "max")
    return MetricSpec(key, key, None)


def _length_label(text: str) -> str:
    """`4096` -> `4k`, `131072` -> `128k`, `512` -> `512`."""
    try:
        n = int(float(text))
    except ValueError:
        return text
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def _ruler_sort_key(key: str) -> tuple[float, str]:
    tail = key[len(RULER_PREFIX):]
    try:
        return float(tail), key
    except ValueError:
        return math.inf, key


def choose(present: Iterable[str], requested: list[str] | None = None) -> list[MetricSpec]:
    """The metric columns: `requested` in its order (whether or not logged: an absent one shows
    as "–"), else the defaults that some run logged, then its RULER averages by length."""
    if requested:
        return [spec(k) for k in requested]
    present = set(present)
    keys = [k for k in DEFAULT_METRICS if k in present]
    if "bbc/trigger_loss" in present:  # Bigram-Backcopy: the loss, the copy positions' loss, value drain at BOS
        keys += [k for k in BIGRAM_METRICS if k in present]
    keys += sorted((k for k in present if k.startswith(RULER_PREFIX)), key=_ruler_sort_key)
    return [spec(k) for k in keys]


def decimals(value: float) -> int:
    """Decimals that show a value to about four significant digits (at most 3 after the point
    for values >= 1, more for small ones)."""
    a = abs(value)
    if not math.isfinite(a) or a == 0:
        return 3
    if a >= 1000:
        return 0
    if a >= 100:
        return 1
    if a >= 10:
        return 2
    if a >= 0.01:
        return 3
    return min(8, 2 - int(math.floor(math.log10(a))))


def fmt(value: float | None, digits: int | None = None, *, thousands: bool = True) -> str:
    """A number as the tables print it; None and NaN print as the paper's "–"."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    d = decimals(value) if digits is None else digits
    return f"{value:,.{d}f}" if thousands and d == 0 else f"{value:.{d}f}"


_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def axis_text(value: str) -> str:
    """An axis value for display: numbers compact (`10000000000.0` -> `1e+10`, `1.0` -> `1`)."""
    if _NUMBER.match(value or ""):
        x = float(value)
        if x.is_integer() and abs(x) < 1e6:
            return str(int(x))
        return f"{x:g}"
    return value
