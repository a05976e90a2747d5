"""A ladder's arms from its expanded trials, and what a ladder refuses before launch.

An arm is a configuration without its rung and seed: its label (`G1-elementwise ffn_dim=176`),
its values of the varying axes, and its resolved settings as flat dotted keys at the base width
(so `model.gate.position: none` and `model.ffn_dim: 395`, the keys a user writes in a sweep file,
select it). `orchestrator.ladder.runs.baseline_of` picks the baseline among them, for the driver
and the report alike."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from gatedmodels.typedconfig import Issue, flatten_dict, show
from orchestrator.ladder.runs import RUNG_AXIS, Arm, baseline_of, describe, matching, unknown_keys

if TYPE_CHECKING:  # expand builds on this module
    from orchestrator.spec.expand import ExpandedTrial
    from orchestrator.spec.sweep import SweepSpec


def arm_axes(varying: Sequence[str]) -> list[str]:
    """The varying axes that make an arm: all but the rung and the seeds."""
    return [a for a in varying if a != RUNG_AXIS and a.rsplit(".", 1)[-1] != "seed"]


def arm_label(t: ExpandedTrial, axes: list[str]) -> str:
    """An arm's label: its axis values, `G1-elementwise ffn_dim=176`."""
    return " ".join(str(t.axes[a]) if a == "model.gate" else f"{a.rsplit('.', 1)[-1]}={t.axes[a]}" for a in axes) or "all"


def arm_of(t: ExpandedTrial, axes: list[str]) -> Arm:
    config = {k: "none" if v is None else str(v) for k, v in flatten_dict(t.axis_config.to_dict()).items()}
    return Arm(arm_label(t, axes), {a: str(t.axes[a]) for a in axes}, config)


def arms(trials: Sequence[ExpandedTrial], varying: Sequence[str]) -> list[Arm]:
    """The arms in the sweep's order (the first trial of each)."""
    axes = arm_axes(varying)
    out: dict[str, Arm] = {}
    for t in trials:
        label = arm_label(t, axes)
        if label not in out:
            out[label] = arm_of(t, axes)
    return list(out.values())


def ladder_problems(spec: SweepSpec, trials: Sequence[ExpandedTrial], varying: Sequence[str]) -> list[Issue]:
    """A ladder under a scheduler that stops trials early (its points need whole budgets), promotion
    under a search that samples trials, a promotion baseline that names no arm, and top_k that
    keeps every arm."""
    lad = spec.ladder
    if lad is None:
        return []
    out = []
    if spec.scheduler is not None:
        out.append(
            Issue(
                "scheduler",
                f"{spec.scheduler.type} stops trials early, and a ladder's fits need every run's whole budget (a stopped run "
                "gives no point at its rung); drop the scheduler, or use ladder.promote to stop arms between rungs",
            )
        )
    promote = lad.promote
    if promote is None:
        return out
    if spec.search.type != "grid":
        out.append(
            Issue(
                "ladder.promote",
                f"promotion needs every arm's trials at every rung known before launch, and a {spec.search.type} search samples "
                "them as it goes; drop ladder.promote, or use search.type grid",
            )
        )
        return out
    found = arms(trials, varying)
    want = dict(promote.baseline)
    keys = list(dict.fromkeys([*want, *arm_axes(varying)]))
    missing = unknown_keys(found, want)
    if missing:
        out.append(Issue(f"ladder.promote.baseline.{missing[0]}", f"no arm has this key; the arms have {describe(found, keys)}"))
    elif want and not matching(found, want):
        got = ", ".join(f"{k}: {show(v)}" for k, v in want.items())
        out.append(Issue("ladder.promote.baseline", f"got {{{got}}}, which no arm has; the arms have {describe(found, keys)}"))
    elif baseline_of(found, want) is None:
        out.append(
            Issue("ladder.promote.baseline", f"no arm is a baseline (no gate, softmax attention); name one: {describe(found, keys)}")
        )
    others = len(found) - 1
    if promote.rule == "top_k" and promote.k >= others:
        out.append(
            Issue(
                "ladder.promote.k",
                f"got {promote.k} with {others} arm(s) besides the baseline: every arm would go on; allowed: fewer than {others}",
            )
        )
    return out
