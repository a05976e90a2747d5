"""The `ladder` section of a sweep file: rungs (model shapes, smallest first), the recipe that gives
each rung its budget and settings (`orchestrator.ladder.plan`), the equivalence margin of the
verdicts and optional promotion across rungs. What each rule does and why: docs/ladder.md."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from gatedmodels.typedconfig import Config, Issue, Limits, show
from orchestrator.core.bounds import MAX_BATCH, MAX_STEPS

MIN_RUNGS = 3
"""A fit of E + A·C^−α has three parameters."""
ASPECT = (4, 1024)
"""Width over depth a rung may have."""


@dataclass(kw_only=True, frozen=True)
class RungConfig(Config):
    """One rung of a ladder: a model shape, optionally with its own training settings."""

    name: str = ""
    """Its name in trial names and reports; default `d<d_model>-l<n_layers>` (or the preset's name)."""
    size: str | None = None
    """A preset (`gatedmodels.presets`) whose shape this rung takes, instead of d_model/n_layers."""
    d_model: int | None = None
    """Width of the residual stream."""
    n_layers: int | None = None
    """Decoder blocks."""
    steps: int | None = None
    """Optimizer steps of this rung (wins over the ladder's budget)."""
    lr: float | None = None
    """Peak learning rate of this rung (wins over the ladder's lr_rule)."""
    batch_size: int | None = None
    """Sequences per micro-batch of this rung (wins over the ladder's batch_rule)."""
    warmup_steps: int | None = None
    """Warmup steps of this rung (wins over warmup_fraction and warmup_tokens_per_param)."""

    LIMITS = Limits({"d_model": (1, 65_536), "n_layers": (1, 1024), "steps": (1, MAX_STEPS), "batch_size": (1, MAX_BATCH)})

    def problems(self) -> list[Issue]:
        out = []
        if self.size is None and (self.d_model is None or self.n_layers is None):
            out.append(Issue("", "give d_model and n_layers, or a preset as size"))
        if self.size is not None and (self.d_model is not None or self.n_layers is not None):
            out.append(Issue("size", "a rung is either a preset (size) or a shape (d_model, n_layers), not both"))
        if self.lr is not None and not self.lr > 0:
            out.append(Issue("lr", f"got {self.lr}; allowed: > 0"))
        if self.warmup_steps is not None and self.warmup_steps < 0:
            out.append(Issue("warmup_steps", f"got {self.warmup_steps}; allowed: >= 0"))
        return out


@dataclass(kw_only=True, frozen=True)
class PromotionConfig(Config):
    """Successive halving across scale: every arm trains on the first `after` rungs; from then
    on, each next rung is trained only by the arms that earned it, judged on the multiplier's
    trend over the rungs trained so far (its prediction for the next rung), so an arm whose
    advantage grows with scale is not stopped at a small rung."""

    after: int = 3
    """Rungs every arm trains before the first decision (at least 3: a trend needs three)."""
    rule: Literal["interval", "top_k"] = "interval"
    """`interval`: an arm goes on unless the 95% interval of its multiplier predicted at the next
    rung (the trend of its anchored multipliers over the rungs trained, extrapolated) lies entirely
    below 1; `top_k`: the `k` arms with the largest predicted multiplier go on."""
    k: int = 1
    """Arms that go on under `top_k` (the baseline always does); fewer than the arms besides the baseline."""
    metric: Literal["val_loss", "val_bpb"] = "val_loss"
    """The held-out metric the decisions fit."""
    baseline: dict[str, Any] = field(default_factory=dict)
    """The baseline arm's values, in the keys of the sweep file (`model.gate.position: none`,
    `model.ffn_dim: 395`; default: no gate and softmax attention, the first such arm)."""

    LIMITS = Limits({"after": (MIN_RUNGS, 1000), "k": (1, 10_000)})


@dataclass(kw_only=True, frozen=True)
class LadderConfig(Config):
    """A scaling ladder: rungs (smallest first) and the recipe for their budgets and settings."""

    rungs: list[RungConfig] = field(default_factory=list)
    """The rungs, smallest first (at least three)."""
    budget: Literal["tokens", "compute"] = "tokens"
    """`tokens`: every arm of a rung trains the same tokens (token-matched: an arm whose variant
    costs more per token spends more compute, which the fits count); `compute`: every arm of a rung
    spends the same training FLOPs (an arm that costs more per token trains fewer tokens)."""
    tokens_per_param: float = 20.0
    """Training tokens per parameter of the rung's base model (Chinchilla's 20), counting `params`."""
    params: Literal["non_embedding", "total"] = "non_embedding"
    """Which parameters the budget counts: without the embedding (Kaplan et al.) or all."""
    flops: list[float] | None = None
    """A training-FLOP budget per rung (of the base model) instead of tokens_per_param."""
    lr_rule: Literal["width", "params", "fixed"] = "width"
    """`width`: lr x (base d_model / rung d_model)^lr_exponent; `params`: lr x (base N / rung
    N)^(1/3) (OLMo-core's ladders); `fixed`: every rung the arm's lr."""
    lr_exponent: float = 1.0
    """Exponent of the width rule (1: lr proportional to 1/width)."""
    batch_rule: Literal["fixed", "params"] = "fixed"
    """`fixed`: the base's train.batch_size at every rung; `params`: batch x (rung N / base
    N)^(2/3), rounded (OLMo-core's ladders); a rung's own batch_size wins."""
    warmup_fraction: float | None = None
    """Warmup as a share of each rung's steps; None: train.warmup_steps."""
    warmup_tokens_per_param: float | None = None
    """Warmup of at least this many tokens per parameter of the rung (OLMo-core: 1); with
    warmup_fraction, the larger of the two."""
    margin: float | None = None
    """An equivalence margin for the verdicts: a multiplier whose interval lies within
    [1/(1 + margin), 1 + margin] is "no practical difference" (e.g. 0.05: within 5%)."""
    promote: PromotionConfig | None = None
    """Optional: train the later rungs only with the arms that earn them (see PromotionConfig)."""

    LIMITS = Limits({"tokens_per_param": (1e-6, 1e9), "lr_exponent": (-4, 4)})

    def problems(self) -> list[Issue]:
        out = []
        if len(self.rungs) < MIN_RUNGS:
            out.append(
                Issue("rungs", f"has {len(self.rungs)}; allowed: at least {MIN_RUNGS} (a fit of E + A·C^-alpha has three parameters)")
            )
        if self.warmup_fraction is not None and not 0 <= self.warmup_fraction < 1:
            out.append(Issue("warmup_fraction", f"got {self.warmup_fraction}; allowed: 0 <= fraction < 1"))
        if self.warmup_tokens_per_param is not None and not 0 <= self.warmup_tokens_per_param <= 1e6:
            out.append(Issue("warmup_tokens_per_param", f"got {show(self.warmup_tokens_per_param)}; allowed: 0..1e6"))
        if self.margin is not None and not 0 < self.margin < 10:
            out.append(Issue("margin", f"got {show(self.margin)}; allowed: > 0 and < 10 (0.05: within 5%)"))
        if self.flops is not None:
            if len(self.flops) != len(self.rungs):
                out.append(Issue("flops", f"has {len(self.flops)} budgets for {len(self.rungs)} rungs; give one per rung"))
            for i, f in enumerate(self.flops):
                if not f > 0:
                    out.append(Issue(f"flops[{i}]", f"got {show(f)}; allowed: > 0"))
        if self.promote is not None and self.promote.after >= len(self.rungs):
            out.append(
                Issue(
                    "promote.after",
                    f"got {self.promote.after} with {len(self.rungs)} rungs; allowed: fewer than the rungs (a rung left to earn)",
                )
            )
        return out  # the rungs' names, shapes and order: `plan.plan_rungs`, which reports them together
