"""The checkpoint format of a trial: where checkpoints live, which ones are whole, pruning, and
loading them safely. Saving and loading through the engine is the checkpoint callback's
(`orchestrator.trial.callbacks.checkpoint`).

    RUN_DIR/checkpoints/stepN/   one DeepSpeed checkpoint (tag `stepN`), its client state being the
                                 trainer's (`Trainer.state_dict`) plus `config_hash`
    RUN_DIR/checkpoints/stepN/COMPLETE   written once the folder is whole and every metric point
                                 up to step N is in the store; only such folders are resumed from
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from orchestrator import storage

COMPLETE = "COMPLETE"  # written into a checkpoint folder once DeepSpeed has finished saving it


def checkpoint_dir(run_dir: Path) -> Path:
    return run_dir / "checkpoints"


def tag(step: int) -> str:
    return f"step{step}"


def _complete_checkpoints(run_dir: Path) -> list[Path]:
    tags = [p for p in checkpoint_dir(run_dir).glob("step*") if p.name[4:].isdigit() and (p / COMPLETE).exists()]
    return sorted(tags, key=lambda p: int(p.name[4:]))


def latest_checkpoint(run_dir: Path) -> str | None:
    """The newest checkpoint known to be whole. DeepSpeed's own `latest` file is not trusted:
    a process killed while writing it leaves it empty or pointing at a half-written folder."""
    tags = _complete_checkpoints(run_dir)
    return tags[-1].name if tags else None


def mark_complete(run_dir: Path, step: int) -> None:
    storage.write_text(checkpoint_dir(run_dir) / tag(step) / COMPLETE, f"{step}\n")


def prune_checkpoints(run_dir: Path, keep: int) -> None:
    """Keep the newest `keep` whole checkpoints; drop older ones and half-written leftovers."""
    whole = _complete_checkpoints(run_dir)
    newest = int(whole[-1].name[4:]) if whole else -1
    for path in checkpoint_dir(run_dir).glob("step*"):
        stale = path in whole[:-keep] or (path not in whole and path.name[4:].isdigit() and int(path.name[4:]) < newest)
        if stale:
            shutil.rmtree(path, ignore_errors=True)


def load_weights_only(engine) -> None:
    """DeepSpeed 0.19 loads checkpoints with `torch.load(weights_only=False)`, which executes
    whatever a tampered checkpoint file contains; load tensors and plain containers only."""
    ce = engine.checkpoint_engine
    if ce is None:
        return

    def load(path: str, map_location=None):
        return torch.load(path, map_location=map_location, weights_only=True)

    ce.load = load


def disk_report(path: Path) -> str:
    """Free space and the file-size limit where a write failed (torch.save reports a full disk as
    a RuntimeError about stream positions, which tells a user nothing)."""
    import resource

    try:
        free = shutil.disk_usage(path).free
    except OSError:
        free = -1
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    limit = "none" if soft == resource.RLIM_INFINITY else f"{soft / 2**20:.0f} MiB"
    return f"free space {free / 2**30:.1f} GiB, file-size limit {limit}"
