"""Checkpoints through the DeepSpeed engine: resume from the newest whole one, save at each
checkpoint step, mark it whole (COMPLETE) only after the step's evaluation and once every metric
point is in the store, prune old ones. The format is orchestrator.trial.checkpoint's.

With a runs folder on an object store (`remote`), the engine still saves and loads in the local
scratch folder: on start the newest whole remote checkpoint is downloaded (and verified) first;
after each save the checkpoint is uploaded, COMPLETE with its manifest last. An upload that fails
is retried with backoff for `GATESWEEP_STORE_RETRY_S` (300 s); if the store is still down then,
training goes on with a warning and the next checkpoint is uploaded instead (a retry of the
trial would resume from the previous whole one)."""

from __future__ import annotations

import shutil
from pathlib import Path

from orchestrator.storage import Location
from orchestrator.storage.retry import retried
from orchestrator.tracking.outcomes import TrialFailed
from orchestrator.trial import checkpoint as ckpt
from orchestrator.trial.callbacks.base import Callback, TrainerView


class Checkpointer(Callback):
    """Every rank saves and loads (DeepSpeed's collective); the main process marks and prunes.
    `tracker` (the MLflow callback, or None) is flushed before a checkpoint counts as whole.
    `remote` (a Location, or None): the trial's folder on an object store."""

    def __init__(
        self,
        run_dir: Path,
        *,
        resume: bool,
        keep: int,
        config_hash: str,
        is_main: bool = True,
        tracker=None,
        remote: Location | None = None,
        say=None,
    ):
        self.run_dir, self.resume, self.keep, self.config_hash = run_dir, resume, keep, config_hash
        self.is_main, self.tracker, self.remote = is_main, tracker, remote
        self.say = say or (lambda line: print(line, flush=True))
        self.trainer: TrainerView | None = None
        self.uploaded: list[int] = []
        """Steps whose checkpoint reached the store (remote only)."""
        self.upload_failed: list[int] = []

    def _warn(self, line: str) -> None:
        self.say(f"warning: {line}")
        if self.tracker is not None:
            self.tracker.logger._warn(line)

    def on_start(self, trainer: TrainerView) -> None:
        self.trainer = trainer
        if self.remote is not None and self.resume:
            if self.is_main:
                retried(lambda: ckpt.download_latest(self.remote, self.run_dir, say=self._warn), f"downloading from {self.remote}")
            _barrier()  # the other ranks of this node load what the main process downloaded
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
            if self.remote is not None:
                self._upload(step)

    def _upload(self, step: int) -> None:
        try:
            retried(
                lambda: ckpt.upload_checkpoint(self.run_dir, self.remote, step), f"uploading checkpoint {ckpt.tag(step)}", say=self._warn
            )
        except OSError as err:
            self.upload_failed.append(step)
            self._warn(
                f"checkpoint {ckpt.tag(step)} could not be uploaded to {self.remote} ({str(err).strip()[:200]}); "
                "training goes on, the next checkpoint is uploaded instead"
            )
            return
        self.uploaded.append(step)
        try:
            ckpt.prune_remote(self.remote, self.keep)
        except OSError as err:  # old checkpoints stay a while longer
            self._warn(f"old checkpoints in {self.remote} not pruned ({str(err).strip()[:160]})")


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()
