"""Promotion across rungs (`orchestrator.ladder.promotion.decide`) on synthetic ladders: it judges
an arm on its multiplier's trend, so an arm whose advantage appears only at the larger rungs goes
on, while an arm that is worse at every rung stops, with the reason; decisions are repeatable."""

from __future__ import annotations

import math

import numpy as np

from orchestrator.ladder import synthetic as sy
from orchestrator.ladder.promotion import decide
from orchestrator.ladder.runs import Run

E, A, ALPHA = sy.LAW
COMPUTE = list(np.geomspace(1.26e11, 1.26e13, 5))


def runs(per_rung: dict[str, list[float]], rungs: int = 3, seeds: int = 3, noise: float = 0.004, seed: int = 0) -> list[Run]:
    """Arms worth `per_rung[arm][r]` x their compute at rung r (the baseline 1), trained on the first `rungs`."""
    rng = np.random.default_rng(seed)
    out = []
    for r in range(rungs):
        c = COMPUTE[r]
        for s in range(seeds):
            common = rng.normal(0, noise * 0.7)
            for arm, ms in {"base": [1.0] * 5, **per_rung}.items():
                loss = (E + A * (ms[r] * c) ** (-ALPHA)) * math.exp(common + rng.normal(0, noise * 0.7))
                out.append(Run(arm, f"r{r}", str(s), c, loss))
    return out


def judge(per_rung: dict[str, list[float]], rule: str = "interval", k: int = 1, **kw):
    arms = ["base", *per_rung]
    return decide(runs(per_rung, **kw), arms, "base", rule=rule, k=k, metric="val_loss", after_rung="r2", next_rung="r3",
                  next_compute=COMPUTE[3], replicates=600)  # fmt: skip


def test_an_advantage_that_grows_with_scale_is_not_stopped():
    # Marin's gate: useless (here worse) at the smallest rung, better at the larger ones
    d = judge({"grows": [0.8, 0.95, 1.1, 1.35, 1.7]})
    assert "grows" in d.kept and not d.stopped
    assert d.predicted["grows"]["value"] > 1.1 and "trend" in d.predicted["grows"]["from"]


def test_an_arm_worse_at_every_rung_stops_and_the_reason_says_why():
    d = judge({"broken": [0.3] * 5, "fine": [1.0] * 5})
    assert d.kept == ["base", "fine"]
    why = d.stopped["broken"]
    assert why.startswith("not promoted after rung r2: multiplier predicted at r3") and "entirely below 1" in why


def test_top_k_keeps_the_k_best_predictions():
    d = judge({"a": [1.0] * 5, "b": [1.5] * 5, "c": [0.7] * 5}, rule="top_k", k=1)
    assert d.kept == ["base", "b"] and set(d.stopped) == {"a", "c"}


def test_without_baseline_runs_or_a_trend_every_arm_goes_on_and_it_says_why():
    d = decide([r for r in runs({"x": [0.3] * 5}) if r.arm != "base"], ["base", "x"], "base", rule="interval", k=1,
               metric="val_loss", after_rung="r2", next_rung="r3", next_compute=COMPUTE[3])  # fmt: skip
    assert d.kept == ["base", "x"] and "no finished runs of the baseline" in d.notes[0]
    one_seed = judge({"x": [0.3] * 5}, seeds=1)
    assert one_seed.kept == ["base", "x"] and "goes on" in one_seed.notes[0]


def test_a_decision_is_a_pure_function_of_the_runs():
    a, b = judge({"x": [0.9, 0.95, 1.0, 1.0, 1.0]}), judge({"x": [0.9, 0.95, 1.0, 1.0, 1.0]})
    assert a == b
