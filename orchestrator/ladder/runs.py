"""What a ladder analysis reads: runs as plain records (arm, rung, seed, compute, loss and the
points a WSD-S schedule read along the way), the arms with their settings, and the one rule that
picks the baseline arm, used by the driver's promotion and by the report alike.

The records are built by whoever holds the runs (the launcher from the tracking store, the
dashboards from a sweep's comparison); nothing here reads a store, so every decision is a pure
function of the records and can be tested on synthetic ladders.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from orchestrator.core.values import same_value

RUNG_AXIS = "ladder.rung"
"""The axis that names a trial's rung (in trial names, tags and reports)."""
DEFAULT_BASELINE = {"model.gate.position": "none", "model.attention.kind": "softmax"}
"""The paper's baseline: no gate, softmax attention (among such arms, the first in sweep order)."""


@dataclass(frozen=True)
class Point:
    """A held-out loss read during a run (at the bottom of a WSD-S decay, or at the end)."""

    tokens: float
    compute: float
    loss: float


@dataclass(frozen=True)
class Run:
    """One finished run of a ladder: its arm, rung and seed, and what it measured. `points` are
    the losses read before the end (a WSD-S schedule's earlier decays); the end is (tokens,
    compute, loss) itself."""

    arm: str
    rung: str
    seed: str
    compute: float
    loss: float
    params: float = math.nan
    """N: the arm's parameters at this rung, counted as the ladder counts them."""
    tokens: float = math.nan
    points: tuple[Point, ...] = ()

    def all_points(self) -> tuple[Point, ...]:
        """The earlier points in order of tokens (a point without its tokens last among them), then the end."""
        earlier = sorted(self.points, key=lambda p: p.tokens if math.isfinite(p.tokens) else math.inf)
        return (*earlier, Point(self.tokens, self.compute, self.loss))


def run_from_metrics(arm: str, rung: str, seed: str, metrics: Mapping[str, float], metric: str) -> Run:
    """A run's record from the final metrics a trial logs: `train_flops`, `flops_per_token`,
    `params_non_embedding` (N), the fitted `metric`, and the WSD-S points `wsd/<i>/...`."""
    m = metrics
    c, loss, per_token = m.get("train_flops", math.nan), m.get(metric, math.nan), m.get("flops_per_token", math.nan)
    tokens = c / per_token if per_token and math.isfinite(per_token) and per_token > 0 else math.nan
    points = []
    i = 0
    while f"wsd/{i}/{metric}" in m:
        points.append(Point(m.get(f"wsd/{i}/tokens", math.nan), m.get(f"wsd/{i}/train_flops", math.nan), m[f"wsd/{i}/{metric}"]))
        i += 1
    n = m.get("params_non_embedding", m.get("params", math.nan))
    return Run(arm, rung, seed, float(c), float(loss), float(n), float(tokens), tuple(points))


@dataclass(frozen=True)
class Arm:
    """An arm: a configuration without its rung. `axes` are its values of the sweep's varying axes
    as the trials record them; `config` its resolved settings as flat dotted keys (the values a
    user can write in a sweep file: `model.gate.position`, `model.ffn_dim`, ...)."""

    label: str
    axes: Mapping[str, str] = field(default_factory=dict)
    config: Mapping[str, str] = field(default_factory=dict)

    def value(self, key: str) -> str | None:
        """The arm's value of `key`, in either spelling (an axis as recorded, or a config key)."""
        if key in self.axes:
            return str(self.axes[key])
        return None if key not in self.config else str(self.config[key])


def matching(arms: Sequence[Arm], want: Mapping[str, object]) -> list[Arm]:
    """The arms whose values equal every (key, value) of `want` (keys in either spelling)."""
    return [a for a in arms if all(a.value(k) is not None and same_value(a.value(k), v) for k, v in want.items())]


def unknown_keys(arms: Sequence[Arm], want: Mapping[str, object]) -> list[str]:
    """Keys of `want` that no arm has (neither an axis nor a config key)."""
    return [k for k in want if all(a.value(k) is None for a in arms)]


def baseline_of(arms: Sequence[Arm], want: Mapping[str, object] | None = None) -> Arm | None:
    """The baseline arm: the first arm, in sweep order, with every value of `want` (a user's
    `baseline: {AXIS: VALUE}` or `--baseline AXIS=VALUE`), on top of the default of no gate and
    softmax attention for the keys `want` does not set (or `want` alone, when no arm has it on top
    of the default). None when no arm matches."""
    rule = {**{k: v for k, v in DEFAULT_BASELINE.items() if not _overridden(k, want or {})}, **(want or {})}
    rule = {k: v for k, v in rule.items() if any(a.value(k) is not None for a in arms)}
    found = matching(arms, rule) or (matching(arms, want) if want else [])  # no ungated arm has the values: the values alone
    return found[0] if found else None


def _overridden(default_key: str, want: Mapping[str, object]) -> bool:
    """A user's `model.gate: X` (the composed label) replaces the default's `model.gate.position`."""
    section = default_key.rsplit(".", 1)[0]
    return default_key in want or any(k == section or k.startswith(section + ".") for k in want)


def describe(arms: Sequence[Arm], keys: Sequence[str] | None = None) -> str:
    """The values a baseline can name, for error messages: `model.gate: none, G1-elementwise; ...`."""
    out = []
    for key in keys or sorted({k for a in arms for k in a.axes}):
        values = list(dict.fromkeys(str(a.value(key)) for a in arms if a.value(key) is not None))
        out.append(f"{key}: {', '.join(values)}")
    return "; ".join(out) or "none"
