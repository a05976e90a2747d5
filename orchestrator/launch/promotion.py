"""Promotion across rungs: successive halving across scale instead of across steps.

A ladder with `promote` runs in stages: first every arm on the first `after` rungs, then one
rung at a time. After each stage the driver reads the finished runs back from the store, fits
every arm's loss against compute over the rungs trained so far (`orchestrator.scaling`), and
decides which arms train the next rung: under `interval` an arm stops when its effective-compute
multiplier's 95% interval at the rung just trained lies entirely below 1 (worse than the baseline
by more than the noise); under `top_k` the k arms with the largest multiplier go on. The baseline
always goes on; an arm that cannot be fitted goes on, and the reason is said.

A stopped arm's remaining trials are settled in MLflow as KILLED with the outcome `not_promoted`
and the reason (the rung, the multiplier and its interval) in `gatesweep.stopped_early`; every
decision goes to the console, to `promotion.json` on the parent run and to state.json. The
decisions are a pure function of the store's finished runs (the bootstrap has a fixed seed), so a
resumed sweep takes the same ones again.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from orchestrator.scaling import MIN_RUNGS, NoFit, Points, fit_ladder
from orchestrator.spec.expand import ExpandedTrial, Expansion
from orchestrator.spec.ladder import RUNG_AXIS, PromotionConfig
from orchestrator.tracking import client, names, search_all
from orchestrator.tracking.outcomes import OUTCOME_TAG, STOPPED_TAG

COMPUTE = "train_flops"
REPLICATES = 100
"""Bootstrap replicates of a decision (fewer than the report's: it runs between stages)."""
BASELINE_VALUES = {"model.gate": "none", "model.attention.kind": "softmax"}
"""The paper's baseline on the architecture axes (the report's `records.BASELINE_AXES`)."""


def arm_axes(expansion: Expansion) -> list[str]:
    return [a for a in expansion.varying if a != RUNG_AXIS and a.rsplit(".", 1)[-1] != "seed"]


def arm_of(t: ExpandedTrial, axes: list[str]) -> str:
    """An arm's label: its axis values, `G1-elementwise ffn_dim=176`."""
    return " ".join(str(t.axes[a]) if a == "model.gate" else f"{a.rsplit('.', 1)[-1]}={t.axes[a]}" for a in axes) or "all"


def baseline_arm(expansion: Expansion, cfg: PromotionConfig) -> str | None:
    """The baseline arm: `cfg.baseline`'s values, else no gate and softmax attention and, among
    such arms, the first value of every other arm axis in the sweep's order."""
    axes = arm_axes(expansion)
    want = {**{a: v for a, v in BASELINE_VALUES.items() if a in axes}, **{k: v for k, v in cfg.baseline.items()}}
    for t in expansion.trials:
        if all(str(t.axes.get(a)) == str(v) for a, v in want.items()):
            return arm_of(t, axes)
    return None


def stages(expansion: Expansion, cfg: PromotionConfig) -> list[list[str]]:
    """Rung names per stage: the first `after` rungs together, then one rung each."""
    rungs = [r.name for r in expansion.rungs]
    return [rungs[: cfg.after]] + [[r] for r in rungs[cfg.after :]]


@dataclass
class Decision:
    """What was decided after one stage."""

    after_rung: str
    kept: list[str]
    stopped: dict[str, str] = field(default_factory=dict)
    """arm -> why it stopped."""
    notes: list[str] = field(default_factory=list)


@dataclass
class Promotion:
    """The staged launch of a promoting ladder: which arms are active, what was decided."""

    cfg: PromotionConfig
    expansion: Expansion
    decisions: list[Decision] = field(default_factory=list)
    stopped: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.axes = arm_axes(self.expansion)
        self.baseline = baseline_arm(self.expansion, self.cfg)
        self.arm = {t.config_hash: arm_of(t, self.axes) for t in self.expansion.trials}
        self.rung = {t.config_hash: t.rung.name if t.rung else "" for t in self.expansion.trials}

    def active(self, config_hash: str) -> bool:
        return self.arm.get(config_hash) not in self.stopped

    def decide(self, uri: str, experiment: str, member: tuple[str, str], done_rungs: list[str]) -> Decision:
        """Fit the finished runs of the launch (`member`: the sweep's member tag and the parent id)
        on `done_rungs` and decide which active arms train the next rung."""
        points = self._points(uri, experiment, member, done_rungs)
        last = done_rungs[-1]
        active = [a for a in dict.fromkeys(self.arm.values()) if a not in self.stopped]
        decision = Decision(last, kept=list(active))
        if self.baseline is None or self.baseline not in points:
            decision.notes.append("no finished baseline runs: every arm goes on")
            return self._record(decision)
        fit_arms = {}
        for a in active:
            rungs_done = set(points[a].rung.tolist()) if a in points else set()
            if len(rungs_done) >= MIN_RUNGS:
                fit_arms[a] = points[a]
            elif a != self.baseline:
                decision.notes.append(f"{a}: finished runs at {len(rungs_done)} rung(s), too few to fit; it goes on")
        try:
            fit = fit_ladder(fit_arms, self.baseline, target=1.0, replicates=REPLICATES)
        except NoFit as err:
            decision.notes.append(f"no fit ({err}): every arm goes on")
            return self._record(decision)
        at = {a: per.get(last) for a, per in fit.multipliers.items()}
        for arm in active:
            if arm == self.baseline:
                continue
            m = at.get(arm)
            if m is None or not all(math.isfinite(x) for x in (m.value, m.low, m.high) if x != math.inf):
                decision.notes.append(f"{arm}: no multiplier at {last}; it goes on")
                continue
            text = (
                f"effective-compute multiplier at {last} {m.value:.3g} [{m.low:.3g}, {m.high:.3g}] vs {self.baseline} ({self.cfg.metric})"
            )
            if self.cfg.rule == "interval" and m.high < 1:
                decision.stopped[arm] = f"not promoted after rung {last}: {text}, entirely below 1"
        if self.cfg.rule == "top_k":
            ranked = sorted((a for a in at if at[a] is not None), key=lambda a: -at[a].value)  # type: ignore[union-attr]
            for arm in ranked[self.cfg.k :]:
                m = at[arm]
                decision.stopped[arm] = (
                    f"not promoted after rung {last}: multiplier {m.value:.3g} [{m.low:.3g}, {m.high:.3g}] vs {self.baseline} "
                    f"({self.cfg.metric}) is not among the top {self.cfg.k}"
                )
        decision.kept = [a for a in active if a not in decision.stopped]
        return self._record(decision)

    def _record(self, decision: Decision) -> Decision:
        self.decisions.append(decision)
        self.stopped.update(decision.stopped)
        return decision

    def _points(self, uri: str, experiment: str, member: tuple[str, str], rungs: list[str]) -> dict[str, Points]:
        cl = client(uri)
        exp = cl.get_experiment_by_name(experiment)
        tag, parent = member
        runs = search_all(cl, [exp.experiment_id], f"tags.`{tag}` = '{parent}' and attributes.status = 'FINISHED'")
        rows: dict[str, list[tuple[float, float, str, object]]] = {}
        for run in runs:
            h = run.data.tags.get(names.CONFIG_HASH_TAG, "")
            arm, rung = self.arm.get(h), self.rung.get(h)
            c, loss = run.data.metrics.get(COMPUTE), run.data.metrics.get(self.cfg.metric)
            if arm is None or rung not in rungs or c is None or loss is None or not (math.isfinite(c) and math.isfinite(loss)):
                continue
            seed = run.data.tags.get(names.axis_tag("train.seed"), run.info.run_id)
            rows.setdefault(arm, []).append((float(c), float(loss), rung, seed))
        return {arm: Points.of(r) for arm, r in rows.items()}

    def to_json(self) -> str:
        return json.dumps(
            {"rule": self.cfg.rule, "k": self.cfg.k, "metric": self.cfg.metric, "baseline": self.baseline,
             "decisions": [asdict(d) for d in self.decisions]},
            indent=2,
        )  # fmt: skip


def settle_not_promoted(uri: str, run_ids: dict[str, str], say: Callable[[str], None]) -> None:
    """Record the end of every trial an arm's stop leaves untrained (run id -> reason)."""
    cl = client(uri)
    for run_id, reason in run_ids.items():
        cl.set_tag(run_id, STOPPED_TAG, reason)
        cl.set_tag(run_id, OUTCOME_TAG, "not_promoted")
        cl.set_terminated(run_id, status="KILLED")
    if run_ids:
        say(f"  {len(run_ids)} trials not run: their arms were not promoted")
