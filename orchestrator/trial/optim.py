"""The optimizer's pieces: the learning-rate schedule and which parameters get weight decay."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch


def lr_lambda(train) -> Callable[[int], float]:
    """The learning rate's factor at each optimizer step (counted from 0): `train.schedule`."""
    if train.schedule == "wsd_s":
        return wsd_s(train)

    def fn(step: int) -> float:
        if train.warmup_steps and step < train.warmup_steps:
            return (step + 1) / train.warmup_steps
        span = max(1, train.steps - train.warmup_steps)
        progress = min(1.0, (step - train.warmup_steps) / span)
        return train.min_lr_ratio + (1 - train.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return fn


def wsd_s(train) -> Callable[[int], float]:
    """Warmup, stable, decay, re-warm (OLMo-core's WSD-S): segments end at `train.decay_steps()`;
    each ends with a linear decay to the floor over `decay_fraction` of it, so the step at its end
    (where the evaluation is) trained at the floor; the next segment re-warms linearly to the peak
    over at most `warmup_steps` (and at most half of the steps before its own decay)."""
    floor = train.min_lr_ratio
    ends = train.decay_steps()
    starts = [0, *ends[:-1]]
    decay = [max(1, round(train.decay_fraction * (e - s))) for s, e in zip(starts, ends)]
    rewarm = [0] + [max(1, min(train.warmup_steps or d, (e - s - dd) // 2)) for s, e, dd, d in zip(starts[1:], ends[1:], decay[1:], decay)]

    def fn(step: int) -> float:
        if train.warmup_steps and step < train.warmup_steps:
            return (step + 1) / train.warmup_steps
        i = next((k for k, e in enumerate(ends) if step < e), len(ends) - 1)
        s, e = starts[i], ends[i]
        if step >= e - decay[i]:
            return 1.0 - (1.0 - floor) * min(1.0, (step - (e - decay[i]) + 1) / decay[i])
        if i and step < s + rewarm[i]:
            return floor + (1.0 - floor) * (step - s + 1) / rewarm[i]
        return 1.0

    return fn


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Decay matrices of linear layers; not norms, gains, embeddings or constant gate logits."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.ndim >= 2 and "embed" not in name and "logits_hw" not in name else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def optimizer(model: torch.nn.Module, train) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW over `param_groups` with the warmup-cosine schedule (DeepSpeed steps both)."""
    impl = {"auto": {}, "fused": {"fused": True}, "foreach": {"foreach": True}, "loop": {"foreach": False}}[getattr(train, "adamw", "auto")]
    opt = torch.optim.AdamW(param_groups(model, train.weight_decay), lr=train.lr, betas=tuple(train.betas), **impl)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(train))
