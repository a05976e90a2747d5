"""Training speed: `train/tokens_per_s` over each log window, and the trial's `tokens_per_s` and
`train_time_s`, and `first_step_s` (step 1, which holds torch.compile's compilation when
`train.compile` is on). A step's time is its whole `Trainer.advance` (forward, backward, optimizer and
per-step callbacks), not evaluations or checkpoints; the final rate leaves out step 1, which pays
one-off allocation and thread start-up."""

from __future__ import annotations

import time

from orchestrator.trial.callbacks.base import Callback, TrainerView


class Speed(Callback):
    def after_resume(self, trainer: TrainerView) -> None:
        self.trainer = trainer
        self.tokens_per_step = trainer.tokens_per_step
        self.window_tokens = 0
        self.window_from: float | None = None  # trainer.train_s when the window's first step began
        self.timed_from: tuple[float, int] | None = None  # (train_s, tokens_seen) before the first timed step

    def on_step(self, step: int, loss: float, grad_norm: float | None) -> None:
        t = self.trainer  # t.train_s does not hold this step's time yet
        if self.window_from is None:
            self.window_from = t.train_s
        self.window_tokens += self.tokens_per_step
        if self.timed_from is None and step > 1:
            self.timed_from = (t.train_s, t.tokens_seen - self.tokens_per_step)

    def collect_metrics(self, step: int, metrics: dict) -> None:
        t = self.trainer
        seconds = t.train_s - self.window_from + time.perf_counter() - t.step_t0
        metrics["train/tokens_per_s"] = self.window_tokens / max(seconds, 1e-9)

    def on_log_interval(self, step: int, metrics: dict) -> None:
        self.window_tokens, self.window_from = 0, None  # the next window starts with the next step

    def collect_final(self, metrics: dict) -> None:
        t = self.trainer
        timed_s = t.train_s - self.timed_from[0] if self.timed_from else 0.0
        metrics["tokens_per_s"] = (t.tokens_seen - self.timed_from[1]) / timed_s if timed_s else t.tokens_seen / max(t.train_s, 1e-9)
        metrics["train_time_s"] = t.train_s
        metrics["first_step_s"] = self.timed_from[0] if self.timed_from else t.train_s  # includes torch.compile's compile
