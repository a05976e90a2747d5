"""Checkpoints through the DeepSpeed engine: resume from the newest whole one, save at each
checkpoint step, mark it whole (COMPLETE) only after the step's evaluation and once every metric
point is in the store, prune old ones. The format is orchestrator.trial.checkpoint's."""

from __future__ import annotations

import shutil
from pathlib import Path

from orchestrator.tracking.outcomes import TrialFailed
from orchestrator.trial import checkpoint as ckpt
from orchestrator.trial.callbacks.base import Callback


class Checkpointer(Callback):
    """Every rank saves and loads (DeepSpeed's collective); the main process marks and prunes.
    `tracker` (the MLflow callback, or None) is flushed before a checkpoint counts as whole."""

    def __init__(self, run_dir: Path, *, resume: bool, keep: int, config_hash: str, is_main: bool = True, tracker=None):
        self.run_dir, self.resume, self.keep, self.config_hash = run_dir, resume, keep, config_hash
        self.is_main, self.tracker = is_main, tracker
        self.trainer = None

    def on_start(self, trainer) -> None:
        self.trainer = trainer
        tag = ckpt.latest_checkpoint(self.run_dir) if self.resume else None
        if tag is None:
            return
        folder = ckpt.checkpoint_dir(self.run_dir)
        _, state = trainer.engine.load_checkpoint(str(folder), tag=tag)
        if state is None:
            raise TrialFailed(f"checkpoint {tag} in {folder} could not be loaded")
        trainer.load_state_dict(state)

    def on_checkpoint(self, step: int) -> None:
        folder = ckpt.checkpoint_dir(self.run_dir)
        folder.mkdir(parents=True, exist_ok=True)
        state = {**self.trainer.state_dict(), "config_hash": self.config_hash}
        tag = ckpt.tag(step)
        try:
            self.trainer.engine.save_checkpoint(str(folder), tag=tag, client_state=state)
        except (OSError, RuntimeError) as err:  # disk full, quota, unwritable: say so, leave nothing that looks whole
            shutil.rmtree(folder / tag, ignore_errors=True)
            raise TrialFailed(
                f"checkpoint {tag} could not be written to {folder} ({type(err).__name__}: "
                f"{str(err).strip().splitlines()[-1][:200]}); {ckpt.disk_report(folder)}",
                kind="disk",
            ) from None
        if self.is_main:
            # every point up to this step reaches the store before the checkpoint counts as
            # whole, so a trial resumed from it has no gap in its curves
            if self.tracker is not None:
                self.tracker.flush(wait=60)
            ckpt.mark_complete(self.run_dir, step)
            ckpt.prune_checkpoints(self.run_dir, self.keep)
