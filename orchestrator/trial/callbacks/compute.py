"""What a trial cost in compute, from its model config (`gatedmodels.costs`): `train_flops` (training
FLOPs per token x the tokens trained), `flops_per_token`, `params` and `params_non_embedding`.
Logged with the final metrics of every trial, so a ladder's fits read each run's true compute,
the gate's FLOPs included."""

from __future__ import annotations

from gatedmodels.costs import model_costs
from orchestrator.trial.callbacks.base import Callback, TrainerView


class Compute(Callback):
    def __init__(self, model_cfg, seq_len: int):
        self.costs = model_costs(model_cfg)
        self.seq_len = seq_len

    def after_resume(self, trainer: TrainerView) -> None:
        self.trainer = trainer

    def collect_final(self, metrics: dict) -> None:
        per_token = self.costs.train_flops(self.seq_len)
        metrics["flops_per_token"] = per_token
        metrics["train_flops"] = per_token * self.trainer.tokens_seen
        metrics["params"] = float(self.costs.params)
        metrics["params_non_embedding"] = float(self.costs.params_non_embedding)
