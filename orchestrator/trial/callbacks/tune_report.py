"""Ray Tune reporting: after each intermediate evaluation (and that step's checkpoint), the
evaluation's metrics go to `ctx.report` with the checkpoint folder when the step saved one. Every
point is flushed to the store first, so a trial the scheduler stops at this report keeps all it
logged, whatever happens next; store warnings travel with the report to the driver's console."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from orchestrator.trial.callbacks.base import Callback
from orchestrator.trial.checkpoint import checkpoint_dir


class TuneReport(Callback):
    """`tracker`: the MLflow callback (None outside the main process)."""

    def __init__(self, report: Callable[[dict, Path | None], None], run_dir: Path, tracker=None):
        self.report, self.run_dir, self.tracker = report, run_dir, tracker

    def on_report(self, step: int, result, checkpointed: bool) -> None:
        warnings: list[str] = []
        if self.tracker is not None:
            self.tracker.flush(wait=60)
            warnings = self.tracker.pop_warnings()
        self.report(
            {"step": step, **result.metrics, **({"warnings": warnings} if warnings else {})},
            checkpoint_dir(self.run_dir) if checkpointed else None,
        )
