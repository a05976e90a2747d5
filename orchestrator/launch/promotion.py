"""A promoting ladder's stages in the driver: which trials each stage trains, the finished runs
read back from the store, and the decisions (`orchestrator.ladder.promotion.decide`, on the
multiplier's trend) recorded.

Every arm trains the first `after` rungs together; then one rung a stage. A stopped arm's
remaining trials are settled in MLflow as KILLED with the outcome `not_promoted` and the reason
(the predicted multiplier and its interval) in `gatesweep.stopped_early`; every decision goes to
the console, to `promotion.json` on the parent run and to state.json. The decisions are a pure
function of the store's finished runs, so a resumed sweep takes the same ones again.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from orchestrator.ladder.config import PromotionConfig
from orchestrator.ladder.promotion import Decision, decide
from orchestrator.ladder.runs import baseline_of, run_from_metrics
from orchestrator.launch.runs import SweepRuns
from orchestrator.launch.state import save_state
from orchestrator.ray.payload import TrialPayload
from orchestrator.ray.progress import SweepProgress
from orchestrator.spec.arms import arm_axes, arm_label, arms
from orchestrator.spec.expand import Expansion
from orchestrator.tracking import client, names, search_all
from orchestrator.tracking.outcomes import OUTCOME_TAG, STOPPED_TAG


def stages(expansion: Expansion, cfg: PromotionConfig) -> list[list[str]]:
    """Rung names per stage: the first `after` rungs together, then one rung each."""
    rungs = [r.name for r in expansion.rungs]
    return [rungs[: cfg.after]] + [[r] for r in rungs[cfg.after :]]


@dataclass
class Promotion:
    """The staged launch of a promoting ladder: which arms are active, what was decided."""

    cfg: PromotionConfig
    expansion: Expansion
    decisions: list[Decision] = field(default_factory=list)
    stopped: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        axes = arm_axes(self.expansion.varying)
        self.arms = [a.label for a in arms(self.expansion.trials, self.expansion.varying)]
        base = baseline_of(arms(self.expansion.trials, self.expansion.varying), self.cfg.baseline)
        self.baseline = base.label if base is not None else None
        self.arm = {t.config_hash: arm_label(t, axes) for t in self.expansion.trials}
        self.rung = {t.config_hash: t.rung.name if t.rung else "" for t in self.expansion.trials}
        self.compute = {r.name: r.flops for r in self.expansion.rungs}

    def active(self, config_hash: str) -> bool:
        return self.arm.get(config_hash) not in self.stopped

    def decide(self, uri: str, experiment: str, member: tuple[str, str], done_rungs: list[str], next_rung: str) -> Decision:
        """Fit the finished runs of the launch (`member`: the sweep's member tag and the parent id)
        on `done_rungs` and decide which active arms train `next_rung`."""
        active = [a for a in self.arms if a not in self.stopped]
        if self.baseline is None:
            d = Decision(done_rungs[-1], kept=active, notes=["no baseline arm: every arm goes on"])
        else:
            d = decide(
                self._runs(uri, experiment, member, done_rungs), active, self.baseline, rule=self.cfg.rule, k=self.cfg.k,
                metric=self.cfg.metric, after_rung=done_rungs[-1], next_rung=next_rung, next_compute=self.compute.get(next_rung, math.nan),
            )  # fmt: skip
        self.decisions.append(d)
        self.stopped.update(d.stopped)
        return d

    def _runs(self, uri: str, experiment: str, member: tuple[str, str], rungs: list[str]) -> list:
        cl = client(uri)
        exp = cl.get_experiment_by_name(experiment)
        tag, parent = member
        found = search_all(cl, [exp.experiment_id], f"tags.`{tag}` = '{parent}' and attributes.status = 'FINISHED'")
        out = []
        for run in found:
            h = run.data.tags.get(names.CONFIG_HASH_TAG, "")
            arm, rung = self.arm.get(h), self.rung.get(h)
            if arm is None or rung not in rungs:
                continue
            seed = run.data.tags.get(names.axis_tag("train.seed"), run.info.run_id)
            out.append(run_from_metrics(arm, rung, seed, run.data.metrics, self.cfg.metric))
        return out

    def to_json(self) -> str:
        return json.dumps(
            {"rule": self.cfg.rule, "k": self.cfg.k, "metric": self.cfg.metric, "baseline": self.baseline,
             "decisions": [asdict(d) for d in self.decisions]},
            indent=2,
            allow_nan=False,
            default=str,
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


def run_stages(runs: SweepRuns, payloads: list[TrialPayload], board: SweepProgress, fit: Callable[[list[TrialPayload]], None]) -> None:
    """Train a promoting ladder stage by stage: `fit` each stage's trials of the arms still in
    (one Tuner), settle the trials of the stopped arms, then decide which arms train the next rung
    (the decision on the console, in state.json, and at the end in promotion.json on the parent)."""
    spec, expansion = runs.spec, runs.expansion
    assert spec.ladder is not None and spec.ladder.promote is not None
    promo = Promotion(spec.ladder.promote, expansion)
    member = (names.member_tag(spec.name), runs.state["parent_run_id"])
    done: list[str] = []
    plan = stages(expansion, promo.cfg)
    for i, rungs in enumerate(plan):
        batch = [p for p in payloads if promo.rung[p.config_hash] in rungs and promo.active(p.config_hash)]
        left = {p.run_id: promo.stopped[promo.arm[p.config_hash]] for p in payloads
                if promo.rung[p.config_hash] in rungs and not promo.active(p.config_hash) and p.run_id}  # fmt: skip
        settle_not_promoted(runs.uri, left, board.say)
        board.skip({p.config_hash for p in payloads if p.run_id in left})  # they will not run: out of the ETA
        if batch:
            board.say(f"ladder stage {i + 1}/{len(plan)}: rung(s) {', '.join(rungs)}, {len(batch)} trials")
            fit(batch)
        done += rungs
        if i + 1 < len(plan):
            d = promo.decide(runs.uri, runs.experiment, member, done, plan[i + 1][0])
            for arm, why in d.stopped.items():
                board.say(f"  promotion: {arm} stops: {why}")
            for note in d.notes:
                board.say(f"  promotion: {note}")
            board.say(f"  promotion after {d.after_rung}: {', '.join(d.kept)} go on to {plan[i + 1][0]}")
            runs.state["promotion"] = json.loads(promo.to_json())
            save_state(runs.dir, runs.state)
    client(runs.uri).log_text(member[1], promo.to_json(), "promotion.json")
