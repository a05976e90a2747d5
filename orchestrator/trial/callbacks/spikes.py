"""Loss-spike monitoring: both rules of orchestrator.trial.spikes on every step, with the position
of the step's first micro-batch for forensics; the counts go into the step and final metrics and
the detector's state into every checkpoint."""

from __future__ import annotations

from orchestrator.trial.callbacks.base import Callback
from orchestrator.trial.spikes import SpikeDetector


class SpikeMonitor(Callback):
    state_key = "spikes"

    def __init__(self, train, *, rank: int = 0, world: int = 1):
        self.detector = SpikeDetector(train.spikes)
        self.seed, self.grad_accum, self.batch_size = train.seed, train.grad_accum, train.batch_size
        self.rank, self.world = rank, world

    def batch_position(self, step: int, micro: int) -> dict:
        """Where the micro-batch of 0-based `step` sits in the data order (seed, sequence range)."""
        first = (step * self.grad_accum + micro) * self.world * self.batch_size + self.rank * self.batch_size
        return {"step": step, "micro_batch": micro, "rank": self.rank, "seed": self.seed, "sequences": [first, self.batch_size]}

    def on_step(self, step: int, loss: float, grad_norm: float | None) -> None:
        self.detector.update(step, loss, grad_norm, self.batch_position(step - 1, 0))

    def collect_metrics(self, step: int, metrics: dict) -> None:
        metrics.update(self.detector.summary())

    def collect_final(self, metrics: dict) -> None:
        metrics.update(self.detector.summary())

    def state_dict(self) -> dict:
        return self.detector.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.detector.load_state_dict(state)
