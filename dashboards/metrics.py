"""The report's metric columns: which MLflow metrics, in what order, which way is better, and how
their numbers are printed.

The metrics and their directions come from the registry, `orchestrator.core.metrics`. The default
columns are its `headline` metrics, the paper's (REFERENCE §2-§3, Tables 1, 4 and 5):
perplexity, MMLU, first-token attention (F-Attn), Gu et al.'s sink ratio, massive activations
(M-Act), the mean gate score, loss spikes, throughput, and RULER averages per context length
when a run has them; Bigram-Backcopy runs add the registry's `bigram` metrics. A column appears
only when at least one run of the sweep logged it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from orchestrator.core import metrics as registry
from orchestrator.core.metrics import Better as Direction

DEFAULT_METRICS = registry.names("headline")
DEFAULT_FAMILIES = registry.prefixes("headline")
"""Families whose members are default columns too (RULER averages per length)."""
FIRST_TOKEN = registry.get("first_token_attn").name
"""Drawn per layer (`first_token_attn/layer_i`) and shown with its uniform-attention level."""
UNIFORM_FIRST_TOKEN = registry.get("first_token_attn_uniform").name
TRAIN_LOSS = registry.get("train/loss").name
"""The loss curves' metric."""


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
    """The column of a metric key: the registry's label and direction (a per-layer key is its
    metric's with the layer, a family member its family's with the rest of the key: `RULER 4k`);
    unknown keys get their own name, and a better side only when they are accuracies."""
    m = registry.lookup(key)
    if m is not None and m.prefix:
        return MetricSpec(key, f"{m.label} {_length_label(key[len(m.name) :])}", m.better)
    if m is not None:
        label = m.label if key == m.name else f"{m.label} L{key.rsplit('_', 1)[1]}"
        return MetricSpec(key, label, m.better)
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


def choose(present: Iterable[str], requested: list[str] | None = None) -> list[MetricSpec]:
    """The metric columns: `requested` in its order (whether or not logged: an absent one shows
    as "–"), else the default columns of what some run logged (`orchestrator.core.metrics.default_columns`:
    the same set as the end-of-sweep table's and `dashboards.results`')."""
    if requested:
        return [spec(k) for k in requested]
    return [spec(k) for k in registry.default_columns(present)]


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
