"""Console progress: one line per log interval and one per evaluation, to `ctx.progress` (the
CLI prints them; tests and users read them, so their text is fixed)."""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.core import metrics
from orchestrator.trial.callbacks.base import Callback


class Console(Callback):
    def __init__(self, progress: Callable[[str], None], steps: int):
        self.say, self.steps = progress, steps

    def on_log_interval(self, step: int, m: dict) -> None:
        self.say(f"step {step}/{self.steps} loss {m['train/loss']:.4f} lr {m['train/lr']:.2e} {m['train/tokens_per_s']:.0f} tok/s")

    def on_eval(self, step: int, result) -> None:
        self.say(f"eval step {step}: " + " ".join(metrics.progress_parts(result.metrics)))
        for line in result.warnings:
            self.say(f"warning: {line}")
