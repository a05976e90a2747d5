"""What a trainer callback can watch: the events of `orchestrator.trial.trainer.Trainer`, in the
order a trial meets them, and what it may read of the trainer (`TrainerView`). Every method is
a no-op here; a callback overrides the ones it needs, and the trainer calls per-step events only
on the callbacks that override them.

Callbacks run in list order (`orchestrator.trial.run.make_trainer`): metrics are logged before
the console prints them, and the final metrics are logged before the artifacts are written.
"""

from __future__ import annotations

from typing import Any, Protocol

from orchestrator.evals.heldout import EvalResult


class TrainerView(Protocol):
    """What a callback may read of the trainer it watches (`orchestrator.trial.trainer.Trainer`
    is one); the trainer imports this module, not the other way round."""

    step: int
    """Optimizer steps done."""
    resumed_from: int
    """The step a resume continued from (0: a fresh start)."""
    tokens_seen: int
    tokens_per_step: int
    train_s: float
    """Seconds spent in optimizer steps (their callbacks included)."""
    step_t0: float
    """perf_counter() when the current step began."""
    eval_s: float
    """Seconds spent in periodic evaluations."""
    engine: Any
    """The DeepSpeed engine (the checkpoint callback saves and loads through it)."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


class Callback:
    state_key: str | None = None
    """When set, `state_dict()` travels in every checkpoint under this key and comes back
    through `load_state_dict` on resume."""

    def on_start(self, trainer: TrainerView) -> None:
        """Built, before the first step; the checkpoint callback restores the trainer's state here."""

    def after_resume(self, trainer: TrainerView) -> None:
        """The state training continues from is in place (`trainer.step`, `trainer.resumed_from`)."""

    def on_step(self, step: int, loss: float, grad_norm: float | None) -> None:
        """After each optimizer step (`step` counts from 1). Inside the timed part of the step."""

    def collect_metrics(self, step: int, metrics: dict[str, float]) -> None:
        """At a log interval: add this callback's step metrics to `metrics`."""

    def on_log_interval(self, step: int, metrics: dict[str, float]) -> None:
        """At a log interval, once every callback has collected: the step metrics."""

    def on_eval(self, step: int, result: EvalResult) -> None:
        """After each held-out evaluation (periodic, at the last step, or once more on a resume
        of a finished trial)."""

    def on_checkpoint(self, step: int) -> None:
        """At a checkpoint step, after that step's evaluation."""

    def on_report(self, step: int, result: EvalResult, checkpointed: bool) -> None:
        """After an intermediate evaluation and the step's checkpoint, if any: where a driver such
        as Ray Tune judges the trial. Not at the last step (its result goes to the caller)."""

    def collect_final(self, metrics: dict[str, float]) -> None:
        """Training is over: add this callback's final metrics to `metrics`."""

    def on_end(self, step: int, metrics: dict[str, float]) -> None:
        """The final metrics, complete."""

    def on_failure(self, outcome: str, reason: str, traceback_text: str | None = None) -> None:
        """The trial ended early (an outcome of orchestrator.tracking.outcomes); must not raise."""

    def state_dict(self) -> Any:
        return None

    def load_state_dict(self, state: Any) -> None:
        pass
