"""The size axis as a scaling ladder: the `ladder` section of a sweep file.

A ladder lists rungs (model shapes, smallest first) and the rules that give each rung its
training budget and settings; expansion crosses the rungs with the grid and zip axes (gate
variants, attention kinds, seeds), so every rung x arm x seed is one trial, named
`<arm>-<rung>-s<seed>` and tagged with the axis `ladder.rung`.

The rules, chosen so that a ladder is a family of models and not a list of unrelated ones:

- **Shape.** A rung sets `d_model` and `n_layers` (or names a preset with `size`). Everything
  width-proportional follows the width: the head size stays the base model's (`n_heads =
  d_model / head_dim`), the query/KV head ratio stays the base's, and the FFN width scales with
  `d_model` from the *arm's* own FFN width at the base width. So an arm that widens the FFN to
  match a gate's parameters at the base width (`model.ffn_dim: 395` beside 352 at d 128) stays
  parameter-matched at every rung (the G1 gate adds d x d weights per layer; SwiGLU's FFN
  3 x d x f, so +d/3 FFN width per layer matches it at any d). Depth is the rung's: the width
  over depth (the aspect ratio) may vary, within 4..1024.
- **Budget.** Every arm of a rung trains on the same tokens, so arms differ in compute only by
  what the variant adds per token, which the fits count (`gatedmodels.costs`). The tokens are
  `tokens_per_param` x N (Chinchilla's 20 by default; Hoffmann et al. 2022), N being the rung's
  *non-embedding* parameters of the base model (Kaplan et al. 2020: the embedding matters little
  for small-model laws, and with a byte vocabulary it is a large share of a tiny model that costs
  no matmul), or `params: total`; or `flops`: a training-FLOP budget per rung; or `steps` on a
  rung, which wins. Steps = tokens / tokens per step (batch x grad_accum x seq_len x workers).
- **Learning rate.** `lr_rule: width` (default) scales the arm's LR as (base d_model / rung
  d_model)^`lr_exponent`: GPT-3's table of learning rates falls about as 1/width from 125M to 13B
  parameters (Brown et al. 2020, Table 2.1), and 1/width is µP's rule for Adam on hidden weights;
  `fixed` keeps the arm's LR; a rung's own `lr` wins over both.
- **Warmup** is `warmup_fraction` of a rung's steps when set, else `train.warmup_steps`; a rung
  whose steps do not exceed its warmup is refused. **Batch size** is the base's (a rung's own
  `batch_size` wins): at these scales the critical batch is far above what a CPU trains.

Refused before anything launches, each naming the dotted field: fewer than three rungs (a fit of
E + A·C^−α has three parameters), rungs that do not grow (by N) or repeat a shape, widths the
head size does not divide, steps below the warmup, budgets that round to no step, and grid or zip
axes that would fight the ladder (the shape fields, `train.steps`, `train.batch_size`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from gatedmodels import ModelConfig
from gatedmodels.costs import ModelCosts, model_costs
from gatedmodels.typedconfig import Config, ConfigError, Issue, Limits, show
from orchestrator.spec.bounds import MAX_BATCH, MAX_STEPS

if TYPE_CHECKING:
    from orchestrator.spec.data import DataConfig
    from orchestrator.spec.train import TrainConfig

RUNG_AXIS = "ladder.rung"
"""The axis that names a trial's rung (in trial names, tags and reports)."""
SHAPE_FIELDS = ("size", "d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim")
"""Model fields a ladder sets on every rung (an axis over one of them would fight it)."""
TRAIN_FIELDS = ("steps", "batch_size")
"""Training fields a ladder sets on every rung."""
MIN_RUNGS = 3
ASPECT = (4, 1024)


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
    """Sequences per micro-batch of this rung (default: the base's train.batch_size)."""
    warmup_steps: int | None = None
    """Warmup steps of this rung (wins over warmup_fraction)."""

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
    on, each next rung is trained only by the arms that earned it at the rung before."""

    after: int = 3
    """Rungs every arm trains before the first decision (at least 3: a fit needs three)."""
    rule: Literal["interval", "top_k"] = "interval"
    """`interval`: an arm goes on unless its effective-compute multiplier's 95% interval at the
    rung just trained lies entirely below 1; `top_k`: the `k` arms with the largest multiplier go on."""
    k: int = 1
    """Arms that go on under `top_k` (the baseline always does)."""
    metric: Literal["val_loss", "val_bpb"] = "val_loss"
    """The held-out metric the decisions fit."""
    baseline: dict[str, Any] = field(default_factory=dict)
    """The baseline arm's axis values (default: no gate, softmax attention, and the first value of
    every other arm axis), e.g. {model.ffn_dim: 395} for a parameter-matched baseline."""

    LIMITS = Limits({"after": (MIN_RUNGS, 1000), "k": (1, 10_000)})


@dataclass(kw_only=True, frozen=True)
class LadderConfig(Config):
    """A scaling ladder: rungs (smallest first) and the rules for their budgets and settings."""

    rungs: list[RungConfig] = field(default_factory=list)
    """The rungs, smallest first (at least three)."""
    tokens_per_param: float = 20.0
    """Training tokens per parameter of a rung (Chinchilla's 20), counting `params`."""
    params: Literal["non_embedding", "total"] = "non_embedding"
    """Which parameters the budget counts: without the embedding (Kaplan et al.) or all."""
    flops: list[float] | None = None
    """A training-FLOP budget per rung instead of tokens_per_param (one number per rung)."""
    lr_rule: Literal["width", "fixed"] = "width"
    """`width`: lr x (base d_model / rung d_model)^lr_exponent; `fixed`: every rung the arm's lr."""
    lr_exponent: float = 1.0
    """Exponent of the width rule (1: lr proportional to 1/width)."""
    warmup_fraction: float | None = None
    """Warmup as a share of each rung's steps; None: train.warmup_steps."""
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
        names = [r.name for r in self.rungs if r.name]
        for i, r in enumerate(self.rungs):
            if r.name and names.count(r.name) > 1:
                out.append(Issue(f"rungs[{i}].name", f"got {r.name!r}, which names another rung too"))
        return out


@dataclass(frozen=True)
class RungPlan:
    """One rung resolved against the base trial: its shape, budget and settings."""

    index: int
    name: str
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn_dim: int
    """The base model's FFN width at this rung (an arm's scales from its own)."""
    steps: int
    tokens: int
    batch_size: int
    warmup_steps: int
    lr_factor: float
    """The arm's lr is multiplied by this (1 under lr_rule fixed)."""
    lr: float | None
    """This rung's own lr, when it sets one."""
    base: ModelCosts
    """The base model's costs at this rung (the budget's parameter count, FLOPs per token)."""

    def to_dict(self) -> dict:
        return {
            "rung": self.name,
            "index": self.index,
            "d_model": self.d_model,
            "n_layers": self.n_layers,
            "n_heads": self.n_heads,
            "n_kv_heads": self.n_kv_heads,
            "head_dim": self.head_dim,
            "ffn_dim": self.ffn_dim,
            "params": self.base.params,
            "params_non_embedding": self.base.params_non_embedding,
            "steps": self.steps,
            "tokens": self.tokens,
            "batch_size": self.batch_size,
            "warmup_steps": self.warmup_steps,
            "lr_factor": self.lr_factor,
        }


def expected_vocab(data: DataConfig) -> int | None:
    """The vocabulary a trial's tokenizer will have, known without building it (None: unknown)."""
    if data.source == "bigram-backcopy":
        return int(data.bigram.vocab_size) + 1
    tok = data.tokenizer
    if tok == "byte":
        return 257
    if tok == "gpt2":
        return 50257
    if tok.startswith("bpe:") and tok[4:].isdigit():
        return int(tok[4:])
    try:  # a tokenizer.json: its model's vocabulary plus the added tokens
        doc = json.loads(Path(tok).read_text(encoding="utf-8"))
        ids = list((doc.get("model") or {}).get("vocab", {}).values()) + [t.get("id", -1) for t in doc.get("added_tokens") or []]
        return max(int(i) for i in ids) + 1 if ids else None
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def _shape(rung: RungConfig, base: ModelConfig) -> dict:
    if rung.size is not None:
        preset = ModelConfig.preset(rung.size)
        return {k: getattr(preset, k) for k in ("d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim", "ffn_dim")}
    d = int(rung.d_model or 0)
    heads = d // base.head_dim
    group = max(1, base.n_heads // base.n_kv_heads)
    return {
        "d_model": d,
        "n_layers": int(rung.n_layers or 0),
        "n_heads": heads,
        "n_kv_heads": max(1, heads // group),
        "head_dim": base.head_dim,
        "ffn_dim": max(1, round(base.ffn_dim * d / base.d_model)),
    }


def _shape_problems(where: str, rung: RungConfig, base: ModelConfig) -> list[Issue]:
    if rung.size is not None:
        return []
    d, L = int(rung.d_model or 0), int(rung.n_layers or 0)
    out = []
    if d % base.head_dim:
        out.append(Issue(f"{where}.d_model", f"got {d}; must be a multiple of the head size, model.head_dim {base.head_dim}"))
    elif (d // base.head_dim) % max(1, base.n_heads // base.n_kv_heads):
        group = base.n_heads // base.n_kv_heads
        out.append(Issue(f"{where}.d_model", f"got {d}: {d // base.head_dim} heads, which {group} query heads per KV head do not divide"))
    if L and not ASPECT[0] <= d / L <= ASPECT[1]:
        out.append(Issue(f"{where}.n_layers", f"got {L} at d_model {d}: width / depth {d / L:.3g}; allowed: {ASPECT[0]}..{ASPECT[1]}"))
    return out


def plan_rungs(ladder: LadderConfig, base_model: ModelConfig, train: TrainConfig, data: DataConfig, workers: int = 1) -> list[RungPlan]:
    """Each rung resolved against the base trial (`base_model`, the base's train and data
    sections); ConfigError (paths under `ladder`) for a ladder that cannot be trained as given."""
    if base_model.moe.n_experts:
        raise ConfigError([Issue("ladder", "ladders of MoE models are not supported (no rule yet for expert width and count per rung)")])
    vocab = expected_vocab(data) or base_model.vocab_size
    issues: list[Issue] = []
    plans: list[RungPlan] = []
    for i, rung in enumerate(ladder.rungs):
        where = f"ladder.rungs[{i}]"
        try:
            shape = _shape(rung, base_model)
        except ConfigError as err:
            issues += [x.prefixed(where) for x in err.issues]
            continue
        problems = _shape_problems(where, rung, base_model)
        if problems:
            issues += problems
            continue
        try:
            model = base_model.replace(vocab_size=vocab, **shape, size="custom")
        except ConfigError as err:
            issues += [Issue(f"{where}.{x.path}" if x.path else where, x.message) for x in err.issues]
            continue
        costs = model_costs(model)
        batch = rung.batch_size or train.batch_size
        per_step = batch * train.grad_accum * data.seq_len * max(1, workers)
        if rung.steps is not None:
            steps = rung.steps
        elif ladder.flops is not None and i < len(ladder.flops):
            steps = math.floor(ladder.flops[i] / costs.train_flops(data.seq_len) / per_step)
        else:
            n = costs.params_non_embedding if ladder.params == "non_embedding" else costs.params
            steps = math.floor(ladder.tokens_per_param * n / per_step)
        if steps < 1:
            issues.append(Issue(where, f"the budget gives {steps} steps ({per_step:,} tokens per step); raise the budget"))
            continue
        if steps > MAX_STEPS:
            issues.append(Issue(where, f"the budget gives {steps:,} steps; allowed: at most {MAX_STEPS:,}"))
            continue
        if rung.warmup_steps is not None:
            warmup = rung.warmup_steps
        elif ladder.warmup_fraction is not None:
            warmup = round(ladder.warmup_fraction * steps)
        else:
            warmup = train.warmup_steps
        if warmup >= steps:
            issues.append(
                Issue(
                    where,
                    f"the budget gives {steps} steps, not more than its warmup ({warmup}); set ladder.warmup_fraction, "
                    "the rung's warmup_steps, or a larger budget",
                )
            )
            continue
        factor = (base_model.d_model / shape["d_model"]) ** ladder.lr_exponent if ladder.lr_rule == "width" else 1.0
        name = rung_names(ladder)[i]
        plans.append(
            RungPlan(
                i, name, **shape, steps=steps, tokens=steps * per_step, batch_size=batch, warmup_steps=warmup, lr_factor=factor,
                lr=rung.lr, base=costs,
            )
        )  # fmt: skip
    issues += _order_problems(plans, ladder)
    if issues:
        raise ConfigError(issues)
    return plans


def _order_problems(plans: list[RungPlan], ladder: LadderConfig) -> list[Issue]:
    out = []
    seen: dict[tuple, str] = {}
    for p in plans:
        key = (p.d_model, p.n_layers, p.n_heads, p.n_kv_heads, p.head_dim, p.ffn_dim)
        if key in seen:
            out.append(
                Issue(f"ladder.rungs[{p.index}]", f"repeats the shape of rung {seen[key]} (d_model {p.d_model}, n_layers {p.n_layers})")
            )
        seen.setdefault(key, p.name)
    count = "non-embedding " if ladder.params == "non_embedding" else ""
    for a, b in zip(plans, plans[1:]):
        na = a.base.params_non_embedding if ladder.params == "non_embedding" else a.base.params
        nb = b.base.params_non_embedding if ladder.params == "non_embedding" else b.base.params
        if nb <= na:
            out.append(
                Issue(
                    f"ladder.rungs[{b.index}]",
                    f"{b.name} has {nb:,} {count}parameters, not more than {a.name} before it ({na:,}); list rungs smallest first",
                )
            )
    return out


def scale_model(model: ModelConfig, plan: RungPlan, base_model: ModelConfig) -> ModelConfig:
    """An arm's model at a rung: the rung's shape, the arm's FFN width scaled with the width."""
    ffn = max(1, round(plan.ffn_dim * model.ffn_dim / base_model.ffn_dim))
    return model.replace(
        size="custom",
        d_model=plan.d_model,
        n_layers=plan.n_layers,
        n_heads=plan.n_heads,
        n_kv_heads=plan.n_kv_heads,
        head_dim=plan.head_dim,
        ffn_dim=ffn,
    )


def scale_train(train: TrainConfig, plan: RungPlan) -> TrainConfig:
    """An arm's training settings at a rung: its steps, warmup, batch and learning rate."""
    lr = plan.lr if plan.lr is not None else train.lr * plan.lr_factor
    return train.replace(steps=plan.steps, warmup_steps=plan.warmup_steps, batch_size=plan.batch_size, lr=lr)


def rung_names(ladder: LadderConfig) -> list[str]:
    """The rungs' names as `plan_rungs` gives them (known without planning)."""
    return [r.name or (r.size if r.size else f"d{r.d_model}-l{r.n_layers}") for r in ladder.rungs]


def axis_problems(paths: list[tuple[str, str]]) -> list[Issue]:
    """Grid, zip or search axes that a ladder sets on every rung: (path, where) pairs."""
    out = []
    for path, where in paths:
        section, _, leaf = path.partition(".")
        if (section == "model" and leaf in SHAPE_FIELDS) or (section == "train" and leaf in TRAIN_FIELDS):
            out.append(Issue(where, f"{path} is set by the ladder's rungs; vary it through ladder.rungs (or drop the ladder)"))
        if path == RUNG_AXIS:
            out.append(Issue(where, f"{RUNG_AXIS} is the ladder's own axis; list rungs under ladder.rungs"))
    return out
