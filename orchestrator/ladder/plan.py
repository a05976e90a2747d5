"""Each rung resolved against the base trial: its shape, budget, batch, learning rate and warmup.

The rules, chosen so that a ladder is a family of models and not a list of unrelated ones:

- **Shape.** A rung sets `d_model` and `n_layers` (or names a preset with `size`). Everything
  width-proportional follows the width: the head size stays the base model's (`n_heads =
  d_model / head_dim`), the query/KV head ratio stays the base's, and the FFN width scales with
  `d_model` from the *arm's* own FFN width at the base width, so an arm parameter-matched to a
  gate at the base width (G1 adds d x d weights per layer; SwiGLU's FFN 3 x d x f, so +d/3 FFN
  width matches it at any d) stays matched at every rung. Width over depth within 4..1024.
- **Budget.** Token-matched by default: every arm of a rung trains `tokens_per_param` x N tokens
  (Chinchilla's 20; N the base model's non-embedding parameters, Kaplan et al. 2020, or `params:
  total`), so arms differ in compute by what their variant adds per token, which the fits count
  (`gatedmodels.costs`); `budget: compute` gives every arm the same FLOPs instead; `flops` sets a
  budget per rung; a rung's `steps` wins. Steps = tokens / tokens per step.
- **Batch.** The base's (`batch_rule: fixed`), or batch ∝ N^(2/3) (`params`, OLMo-core's ladders).
- **Learning rate.** (base d_model / rung d_model)^lr_exponent (`width`: GPT-3's table falls about
  as 1/width, Brown et al. 2020; µP's rule for Adam on hidden weights), or ∝ N^(−1/3) (`params`,
  OLMo-core), or `fixed`; a rung's own `lr` wins.
- **Warmup.** `warmup_fraction` of a rung's steps, at least `warmup_tokens_per_param` x N tokens
  (OLMo-core: 1), else `train.warmup_steps`; a rung whose steps do not exceed its warmup is refused.

Every problem of every rung is reported at once, before anything launches.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gatedmodels import ModelConfig
from gatedmodels.costs import ModelCosts, model_costs
from gatedmodels.typedconfig import ConfigError, Issue
from orchestrator.core.bounds import MAX_STEPS

from .config import ASPECT, LadderConfig, RungConfig
from .runs import RUNG_AXIS

SHAPE_FIELDS = ("size", "d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim")
"""Model fields a ladder sets on every rung (an axis over one of them would fight it)."""
TRAIN_FIELDS = ("steps", "batch_size")
"""Training fields a ladder sets on every rung."""


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
    tokens_per_step: int = 0
    flops: float = 0.0
    """The base model's training FLOPs at this rung (what `budget: compute` gives every arm)."""

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
            "tokens_per_param": self.tokens / self.base.params,
            "tokens_per_param_non_embedding": self.tokens / max(1, self.base.params_non_embedding),
            "batch_size": self.batch_size,
            "warmup_steps": self.warmup_steps,
            "warmup_tokens": self.warmup_steps * self.tokens_per_step,
            "lr_factor": self.lr_factor,
        }


def expected_vocab(data: Any) -> int | None:
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


def _counted(ladder: LadderConfig, costs: ModelCosts) -> int:
    return costs.params_non_embedding if ladder.params == "non_embedding" else costs.params


def plan_rungs(ladder: LadderConfig, base_model: ModelConfig, train: Any, data: Any, workers: int = 1) -> list[RungPlan]:
    """Each rung resolved against the base trial (`base_model`, the base's train and data
    sections); ConfigError (paths under `ladder`), with every rung's problems, for a ladder that
    cannot be trained as given."""
    if base_model.moe.n_experts:
        raise ConfigError([Issue("ladder", "ladders of MoE models are not supported (no rule yet for expert width and count per rung)")])
    vocab = expected_vocab(data) or base_model.vocab_size
    base_costs = model_costs(base_model.replace(vocab_size=vocab))
    issues: list[Issue] = []
    plans: list[RungPlan] = []
    shapes: list[tuple[int, dict, ModelCosts]] = []
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
        shapes.append((i, shape, model_costs(model)))
    names = [r.name for r in ladder.rungs if r.name]
    issues += [
        Issue(f"ladder.rungs[{i}].name", f"got {r.name!r}, which names another rung too")
        for i, r in enumerate(ladder.rungs)
        if r.name and names.count(r.name) > 1
    ]
    issues += _order_problems(ladder, shapes)
    for i, shape, costs in shapes:
        plan = _budget(ladder, ladder.rungs[i], i, shape, costs, base_model, base_costs, train, data, workers)
        if isinstance(plan, Issue):
            issues.append(plan)
        else:
            plans.append(plan)
    if issues:
        raise ConfigError(issues)
    return plans


def _budget(ladder, rung, i, shape, costs, base_model, base_costs, train, data, workers) -> RungPlan | Issue:
    """The rung's batch, steps, warmup and learning rate (an Issue when the recipe cannot train it)."""
    where = f"ladder.rungs[{i}]"
    ratio = _counted(ladder, costs) / max(1, _counted(ladder, base_costs))
    if rung.batch_size is not None:
        batch = rung.batch_size
    elif ladder.batch_rule == "params":
        batch = round(train.batch_size * ratio ** (2 / 3))
        if batch < 1:
            return Issue(
                where, f"batch_rule params gives {train.batch_size} x {ratio:.3g}^(2/3) = {batch} sequences; raise train.batch_size"
            )
    else:
        batch = train.batch_size
    per_step = batch * train.grad_accum * data.seq_len * max(1, workers)
    if rung.steps is not None:
        steps = rung.steps
    elif ladder.flops is not None and i < len(ladder.flops):
        steps = math.floor(ladder.flops[i] / costs.train_flops(data.seq_len) / per_step)
    else:
        steps = math.floor(ladder.tokens_per_param * _counted(ladder, costs) / per_step)
    if steps < 1:
        return Issue(where, f"the budget gives {steps} steps ({per_step:,} tokens per step); raise the budget")
    if steps > MAX_STEPS:
        return Issue(where, f"the budget gives {steps:,} steps; allowed: at most {MAX_STEPS:,}")
    warmup = warmup_steps(ladder, rung, steps, per_step, _counted(ladder, costs), train.warmup_steps)
    if warmup >= steps:
        return Issue(
            where,
            f"the budget gives {steps} steps, not more than its warmup ({warmup}); set ladder.warmup_fraction, the rung's "
            "warmup_steps, or a larger budget",
        )
    if ladder.lr_rule == "width":
        factor = (base_model.d_model / shape["d_model"]) ** ladder.lr_exponent
    elif ladder.lr_rule == "params":
        factor = ratio ** (-1 / 3)
    else:
        factor = 1.0
    name = rung_names(ladder)[i]
    return RungPlan(
        i, name, **shape, steps=steps, tokens=steps * per_step, batch_size=batch, warmup_steps=warmup, lr_factor=factor, lr=rung.lr,
        base=costs, tokens_per_step=per_step, flops=costs.train_flops(data.seq_len) * steps * per_step,
    )  # fmt: skip


def warmup_steps(ladder: LadderConfig, rung: RungConfig, steps: int, per_step: int, params: int, default: int) -> int:
    if rung.warmup_steps is not None:
        return rung.warmup_steps
    out = None
    if ladder.warmup_fraction is not None:
        out = round(ladder.warmup_fraction * steps)
    if ladder.warmup_tokens_per_param is not None:
        out = max(out or 0, math.ceil(ladder.warmup_tokens_per_param * params / per_step))
    return default if out is None else out


def _order_problems(ladder: LadderConfig, shapes: list[tuple[int, dict, ModelCosts]]) -> list[Issue]:
    """Rungs that repeat a shape or do not grow (by the parameters the budget counts)."""
    out = []
    seen: dict[tuple, str] = {}
    names = rung_names(ladder)
    for i, shape, _ in shapes:
        key = tuple(shape[k] for k in ("d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim", "ffn_dim"))
        if key in seen:
            out.append(
                Issue(
                    f"ladder.rungs[{i}]",
                    f"repeats the shape of rung {seen[key]} (d_model {shape['d_model']}, n_layers {shape['n_layers']})",
                )
            )
        seen.setdefault(key, names[i])
    count = "non-embedding " if ladder.params == "non_embedding" else ""
    for (ia, _, ca), (ib, _, cb) in zip(shapes, shapes[1:]):
        na, nb = _counted(ladder, ca), _counted(ladder, cb)
        if nb <= na:
            out.append(
                Issue(
                    f"ladder.rungs[{ib}]",
                    f"{names[ib]} has {nb:,} {count}parameters, not more than {names[ia]} before it ({na:,}); list rungs smallest first",
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


def scale_train(train: Any, plan: RungPlan) -> Any:
    """An arm's training settings at a rung: its steps, warmup, batch and learning rate."""
    lr = plan.lr if plan.lr is not None else train.lr * plan.lr_factor
    return train.replace(steps=plan.steps, warmup_steps=plan.warmup_steps, batch_size=plan.batch_size, lr=lr)


def compute_matched(train: Any, model: ModelConfig, plan: RungPlan, ladder: LadderConfig, seq_len: int) -> Any:
    """`budget: compute`: the arm's steps (and a fraction-based warmup) so that it spends the base
    model's FLOPs at this rung, whatever its variant adds per token."""
    per_token = model_costs(model).train_flops(seq_len)
    steps = max(1, math.floor(plan.flops / per_token / max(1, plan.tokens_per_step)))
    if ladder.warmup_fraction is None and ladder.warmup_tokens_per_param is None:
        return train.replace(steps=steps)
    rung = ladder.rungs[plan.index]
    warm = warmup_steps(ladder, rung, steps, plan.tokens_per_step, _counted(ladder, model_costs(model)), train.warmup_steps)
    return train.replace(steps=steps, warmup_steps=min(warm, steps - 1))


def recipe_text(ladder: LadderConfig, base_d_model: int) -> str:
    """The recipe in one line, as `gatesweep plan` states it."""
    count = "non-embedding parameter" if ladder.params == "non_embedding" else "parameter"
    if ladder.flops is not None:
        budget = "per-rung FLOP budgets"
    else:
        budget = f"{ladder.tokens_per_param:g} tokens per {count}"
    matched = (
        "compute-matched (every arm of a rung the same FLOPs)"
        if ladder.budget == "compute"
        else "token-matched (every arm of a rung the same tokens)"
    )
    lr = {
        "width": f"lr x ({base_d_model} / rung d_model)^{ladder.lr_exponent:g}",
        "params": "lr x (base N / rung N)^(1/3)",
        "fixed": "lr fixed",
    }[ladder.lr_rule]
    batch = "batch x (rung N / base N)^(2/3)" if ladder.batch_rule == "params" else "batch fixed"
    warm = []
    if ladder.warmup_fraction is not None:
        warm.append(f"{ladder.warmup_fraction:.0%} of steps")
    if ladder.warmup_tokens_per_param is not None:
        warm.append(f"at least {ladder.warmup_tokens_per_param:g} tokens per {count}")
    warmup = "warmup " + (", ".join(warm) if warm else "train.warmup_steps")
    return f"budget {budget}, {matched}; {lr}; {batch}; {warmup}; rungs' own steps/lr/batch win"


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
