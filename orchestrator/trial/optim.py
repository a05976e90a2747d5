"""The optimizer's pieces: the learning-rate schedule and which parameters get weight decay."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch


def lr_lambda(train) -> Callable[[int], float]:
    """Linear warmup to the peak, then cosine decay to lr * min_lr_ratio."""

    def fn(step: int) -> float:
        if train.warmup_steps and step < train.warmup_steps:
            return (step + 1) / train.warmup_steps
        span = max(1, train.steps - train.warmup_steps)
        progress = min(1.0, (step - train.warmup_steps) / span)
        return train.min_lr_ratio + (1 - train.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

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
