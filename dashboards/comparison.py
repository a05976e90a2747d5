"""What `stats.compare` returns: a `Comparison` of a sweep's configurations, each a `Row` (its
axes, its runs, the run that counts per seed cell, its `Stat`s, its `Delta`s against the baseline
and the columns where it is best), the main `Effect` of each axis level, and the runs that did
not finish or were superseded."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator.tracking import STATES

from .metrics import MetricSpec, axis_text
from .records import BASELINE_TEXT, GATE_AXIS, RunRecord, SweepRuns
from .seedstats import Delta, Stat


@dataclass
class Row:
    """One configuration (every seed of it)."""

    axes: dict[str, str]
    """Non-seed axis -> value."""
    runs: list[RunRecord]
    """Every run of the configuration, in any state (superseded ones included)."""
    counted: dict[tuple, RunRecord]
    """Seed cell -> the run that counts (newest finished)."""
    stats: dict[str, Stat] = field(default_factory=dict)
    deltas: dict[str, Delta] = field(default_factory=dict)
    best: set[str] = field(default_factory=set)
    baseline: Row | None = None
    is_baseline: bool = False

    @property
    def key(self) -> tuple:
        return tuple(self.axes.values())

    @property
    def n(self) -> int:
        """Finished seeds."""
        return len(self.counted)

    def state_counts(self) -> dict[str, int]:
        """State -> runs, over the runs that count or stand for an unfinished seed cell."""
        out: dict[str, int] = {}
        for run in self.live_runs():
            out[run.state] = out.get(run.state, 0) + 1
        return dict(sorted(out.items(), key=lambda kv: STATES.index(kv[0])))

    def live_runs(self) -> list[RunRecord]:
        """The counted runs plus, per seed cell that finished nowhere, its newest run."""
        return [r for r in self.runs if not r.superseded]

    @property
    def status(self) -> str:
        """`ok` when every seed finished, else e.g. `1 failed, 1 running`."""
        counts = self.state_counts()
        rest = [f"{n} {s}" for s, n in counts.items() if s != "finished"]
        return ", ".join(rest) if rest else "ok"

    def label(self, axes: list[str] | None = None) -> str:
        """Compact name: `G1-elementwise, lr=0.003`."""
        axes = axes if axes is not None else list(self.axes)
        parts = []
        for p in axes:
            v = axis_text(self.axes[p])
            parts.append(v if p == GATE_AXIS or len(axes) == 1 else f"{p.rsplit('.', 1)[-1]}={v}")
        return ", ".join(parts) or "all runs"


@dataclass
class Effect:
    """Main effect of one axis level."""

    level: str
    configs: int
    """Configurations at this level with at least one finished seed."""
    means: dict[str, float | None]


@dataclass
class Comparison:
    """Everything a report shows, computed from a `SweepRuns`."""

    sweep: SweepRuns
    axes: list[str]
    """Non-seed axes that vary (the row key), in the sweep's order."""
    seed_axes: list[str]
    metrics: list[MetricSpec]
    rows: list[Row]
    effects: dict[str, list[Effect]]
    together: dict[str, list[str]]
    """Axis -> axes varied together with it (zipped), shown with it in main effects and plots."""
    unfinished: list[RunRecord]
    """Runs that count for a seed cell and did not finish (failed, stopped, running, ...)."""
    superseded: list[RunRecord]
    """Runs of a seed cell that has a newer or finished run."""
    uniform_first_token: float | None = None
    """What uniform attention would give for first_token_attn (the reference line)."""
    n_tests: int = 0
    """Paired tests in the Δ table: the family Holm's correction adjusts over."""
    baseline_text: str = BASELINE_TEXT
    """What the baseline row is, for the Δ table's headings."""
    levels: dict[str, list[str]] = field(default_factory=dict)
    """Axis -> its levels in the sweep's order (`dashboards.levels`)."""
    arch_axes: list[str] = field(default_factory=list)
    """The axes that make an arm: those a row departs from the baseline on (the gate, the
    attention kind and its settings, the axes --baseline adds)."""
    interactions: list = field(default_factory=list)
    """`dashboards.interactions.Interaction`s: each arm's Δ at every level of each other axis."""
    ladder: Any = None
    """A ladder sweep's fits and multipliers (`orchestrator.ladder.section.LadderReport`), set by the report."""
    environments: list = field(default_factory=list)
    """`dashboards.environments.Environment`s: the numeric environments the counted runs were
    trained under (the runs that recorded one)."""

    def axis_title(self, axis: str) -> str:
        """`train.lr`, or `train.lr (with train.grad_clip)` for a zipped group."""
        with_ = self.together.get(axis)
        return f"{axis} (with {', '.join(with_)})" if with_ else axis

    @property
    def has_baseline(self) -> bool:
        return any(r.is_baseline for r in self.rows)

    def state_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for row in self.rows:
            for s, n in row.state_counts().items():
                out[s] = out.get(s, 0) + n
        return dict(sorted(out.items(), key=lambda kv: STATES.index(kv[0])))
