"""The train and deepspeed sections of a trial: optimisation, the loop, loss-spike rules, the engine."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from gatedmodels.typedconfig import Config, Issue, Limits, deep_merge, flatten_dict, show
from orchestrator.core.bounds import _PARAM_KEY, MAX_BATCH, MAX_STEPS, SEED


@dataclass(kw_only=True, frozen=True)
class SpikeConfig(Config):
    """Loss-spike detection (REFERENCE §3). Both rules are evaluated and logged; `rule` picks
    which one counts as `loss_spikes`."""

    rule: Literal["sigma", "ema"] = "sigma"
    """`sigma`: loss > mean + k*std of the previous `window` steps (OLMo-core SpikeScore);
    `ema`: loss > EMA of the earlier losses + `delta`."""
    window: int = 128
    """Trailing window of the sigma rule (steps)."""
    k: float = 6.0
    """Standard deviations above the trailing mean for the sigma rule."""
    ema_beta: float = 0.9
    """Smoothing of the EMA rule (the paper plots a 0.9-EMA loss curve)."""
    delta: float = 0.3
    """Nats above the EMA for the EMA rule."""
    warmup: int = 100
    """Steps ignored at the start, while the loss falls fast."""

    LIMITS = Limits({"window": (2, 1_000_000), "k": (0, None), "delta": (0, None), "warmup": (0, MAX_STEPS)})

    def problems(self) -> list[Issue]:
        out = []
        if not 0 < self.ema_beta < 1:
            out.append(Issue("ema_beta", f"got {self.ema_beta}; allowed: between 0 and 1"))
        return out


@dataclass(kw_only=True, frozen=True)
class TrainConfig(Config):
    """Optimisation and the training loop."""

    steps: int = 1000
    """Optimizer steps."""
    batch_size: int = 32
    """Sequences per micro-batch per worker (DeepSpeed train_micro_batch_size_per_gpu)."""
    grad_accum: int = 1
    """Micro-batches per optimizer step."""
    lr: float = 3e-3
    """Peak learning rate (AdamW)."""
    min_lr_ratio: float = 0.1
    """The schedule's floor: the cosine decay, and each WSD-S decay, ends at lr * min_lr_ratio."""
    warmup_steps: int = 100
    """Linear warmup steps (and, under wsd_s, the longest re-warm after a decay)."""
    schedule: Literal["cosine", "wsd_s"] = "cosine"
    """`cosine`: linear warmup, then a cosine decay to the floor at the last step. `wsd_s`
    (warmup-stable-decay, OLMo-core's 2026 ladders): linear warmup, then the peak learning rate,
    decaying linearly to the floor over the last `decay_fraction` of each segment that ends at a
    share of the steps listed in `decays`, then re-warming to the peak. A held-out evaluation at
    the bottom of every decay is logged as a point (`wsd/<i>/val_loss` with its tokens and
    FLOPs), so one run gives a scaling ladder several (N, D) points."""
    decays: list[float] = field(default_factory=lambda: [1.0])
    """wsd_s: where each decay ends, as shares of the steps, increasing, the last 1 (the run ends
    at the bottom of a decay), e.g. [0.25, 0.5, 1.0]."""
    decay_fraction: float = 0.2
    """wsd_s: each decay's length as a share of its segment (the steps since the previous decay)."""
    weight_decay: float = 0.1
    """AdamW weight decay on matrices (not on norms, gains or embeddings)."""
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    """AdamW betas."""
    grad_clip: float = 1.0
    """Global gradient-norm clipping (0 disables)."""
    seed: int = 0
    """Seed of initialisation and data order."""
    log_every: int = 10
    """Log training metrics every N steps."""
    eval_every: int = 250
    """Evaluate every N steps (and always at the end); 0: only at the end."""
    checkpoint_every: int = 0
    """Save a DeepSpeed checkpoint every N steps; 0: only when the trial ends."""
    keep_checkpoints: int = 2
    """Newest checkpoints kept on disk."""
    threads: int = 0
    """Torch CPU threads; 0: the CPUs given to the trial (in a sweep, `resources.cpus_per_worker`;
    for `gatesweep train`, OMP_NUM_THREADS if set, else every core)."""
    compile: bool = False
    """torch.compile the model (through DeepSpeed's engine.compile, so checkpoints keep their
    names); its first-step compile time is logged as `compile_time_s`. Falls back to eager with a
    warning where the compiler cannot run."""
    activation_checkpointing: Literal["none", "blocks"] = "none"
    """`blocks`: recompute each transformer block's activations in the backward pass (less
    memory per token, about one more forward of compute)."""
    adamw: Literal["auto", "fused", "foreach", "loop"] = "auto"
    """AdamW implementation: torch's choice for the device, the fused kernel, the multi-tensor
    (foreach) one, or the per-parameter loop. The same update to rounding."""
    spikes: SpikeConfig = field(default_factory=SpikeConfig)
    """Loss-spike detection."""

    LIMITS = Limits(
        {
            "steps": (1, MAX_STEPS),
            "batch_size": (1, MAX_BATCH),
            "grad_accum": (1, MAX_BATCH),
            "warmup_steps": (0, MAX_STEPS),
            "weight_decay": (0, None),
            "grad_clip": (0, None),
            "seed": SEED,
            "log_every": (1, MAX_STEPS),
            "eval_every": (0, MAX_STEPS),
            "checkpoint_every": (0, MAX_STEPS),
            "keep_checkpoints": (1, 1000),
            "threads": (0, 4096),
        }
    )

    def problems(self) -> list[Issue]:
        out = []
        if self.lr <= 0:
            out.append(Issue("lr", f"got {self.lr}; allowed: > 0"))
        if not 0 <= self.min_lr_ratio <= 1:
            out.append(Issue("min_lr_ratio", f"got {self.min_lr_ratio}; allowed: 0..1"))
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            out.append(Issue("betas", f"got {self.betas}; allowed: two numbers in [0, 1)"))
        return out + self._schedule_problems()

    def _schedule_problems(self) -> list[Issue]:
        d = self.decays
        if self.schedule != "wsd_s":
            return [] if d == [1.0] else [Issue("decays", f"got {show(d)}, which only a wsd_s schedule reads; set train.schedule: wsd_s")]
        out = []
        if len(d) > 64:
            out.append(Issue("decays", f"has {len(d)} shares; allowed: at most 64"))
        elif not d or not all(0 < x <= 1 for x in d):
            out.append(Issue("decays", f"got {show(d)}; allowed: shares of the steps in (0, 1]"))
        elif any(b <= a for a, b in zip(d, d[1:])):
            out.append(Issue("decays", f"got {show(d)}; allowed: increasing shares, e.g. [0.25, 0.5, 1.0]"))
        elif d[-1] != 1:
            out.append(Issue("decays", f"got {show(d)}; the last must be 1 (the run ends at the bottom of a decay)"))
        if not 0 < self.decay_fraction < 1:
            out.append(Issue("decay_fraction", f"got {show(self.decay_fraction)}; allowed: between 0 and 1"))
        if out:
            return out
        ends = self.decay_steps()
        if len(set(ends)) < len(ends) or ends[0] <= self.warmup_steps:
            out.append(
                Issue(
                    "decays",
                    f"{show(d)} of {self.steps} steps end at steps {ends}: each decay needs a segment of its own after the "
                    f"warmup ({self.warmup_steps} steps); raise train.steps or use fewer decays",
                )
            )
        return out

    def decay_steps(self) -> list[int]:
        """The steps (counted from 1) at the bottom of each decay: the evaluations a wsd_s schedule
        adds, the last being train.steps ([train.steps] under cosine)."""
        if self.schedule != "wsd_s":
            return [self.steps]
        return [max(1, round(x * self.steps)) for x in self.decays]


@dataclass(kw_only=True, frozen=True)
class DeepSpeedConfig(Config):
    """The DeepSpeed engine of every trial; turned into DeepSpeed's JSON by `to_json`."""

    zero_stage: int = 0
    """ZeRO stage 0-3."""
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    """`auto`: bf16 on GPUs, fp32 on CPUs."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Raw keys merged into the generated DeepSpeed JSON (advanced)."""

    def problems(self) -> list[Issue]:
        out = []
        if not 0 <= self.zero_stage <= 3:
            out.append(Issue("zero_stage", f"got {self.zero_stage}; allowed: 0, 1, 2, 3"))
        return out + _extra_problems(self.extra)

    def resolved_precision(self, on_gpu: bool) -> str:
        if self.precision == "auto":
            return "bf16" if on_gpu else "fp32"
        return self.precision

    def to_json(self, train: TrainConfig, *, on_gpu: bool, world_size: int = 1) -> dict:
        precision = self.resolved_precision(on_gpu)
        ds = {
            "train_micro_batch_size_per_gpu": train.batch_size,
            "gradient_accumulation_steps": train.grad_accum,
            "train_batch_size": train.batch_size * train.grad_accum * world_size,
            "gradient_clipping": train.grad_clip,
            "zero_optimization": {"stage": self.zero_stage},
            "bf16": {"enabled": precision == "bf16"},
            "fp16": {"enabled": precision == "fp16"},
            "steps_per_print": 10**9,
            "wall_clock_breakdown": False,
        }
        return deep_merge(ds, self.extra)


BATCH_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
"""DeepSpeed keys generated from train.batch_size and train.grad_accum (DeepSpeed asserts they agree)."""


def _extra_problems(extra: dict) -> list[Issue]:
    """deepspeed.extra must be JSON, must not contradict the batch settings, and its keys become
    MLflow params (`deepspeed.extra.KEY`), so they must be valid param names."""
    try:
        json.dumps(extra, allow_nan=False)
    except (TypeError, ValueError) as err:
        return [Issue("extra", f"got {show(extra)}; expected JSON values (strings, numbers, true/false, null, lists, mappings): {err}")]
    out = [Issue(f"extra.{k}", "is set from train.batch_size and train.grad_accum; set those instead") for k in BATCH_KEYS if k in extra]
    keys = flatten_dict(extra, "deepspeed.extra")
    if len(keys) > 500:
        out.append(Issue("extra", f"has {len(keys):,} values; allowed: at most 500"))
    bad = [k for k in keys if not _PARAM_KEY.fullmatch(k)]
    if bad:
        out.append(
            Issue(
                "extra",
                f"key {show(bad[0][len('deepspeed.') :])} cannot be an MLflow param name; allowed: letters, "
                "digits, '_', '-', '.', ' ', ':', '/', at most 250 characters with the prefix",
            )
        )
    return out
