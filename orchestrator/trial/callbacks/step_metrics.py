"""The step metrics of each log window: mean and max training loss, mean gradient norm, the
learning rate and the tokens seen so far (`train/...`)."""

from __future__ import annotations

from orchestrator.trial.callbacks.base import Callback, TrainerView


class StepMetrics(Callback):
    def after_resume(self, trainer: TrainerView) -> None:
        self.trainer = trainer
        self.losses: list[float] = []
        self.grad_norms: list[float] = []

    def on_step(self, step: int, loss: float, grad_norm: float | None) -> None:
        self.losses.append(loss)
        if grad_norm is not None:
            self.grad_norms.append(grad_norm)

    def collect_metrics(self, step: int, metrics: dict) -> None:
        losses, t = self.losses, self.trainer
        metrics["train/loss"] = sum(losses) / len(losses)
        metrics["train/loss_max"] = max(losses)
        metrics["train/lr"] = t.engine.get_lr()[0]
        metrics["train/tokens_seen"] = t.tokens_seen
        if self.grad_norms:
            metrics["train/grad_norm"] = sum(self.grad_norms) / len(self.grad_norms)

    def on_log_interval(self, step: int, metrics: dict) -> None:
        self.losses.clear()
        self.grad_norms.clear()
