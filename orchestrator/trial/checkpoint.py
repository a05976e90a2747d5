"""The checkpoint format of a trial: where checkpoints live, which ones are whole, pruning, and
loading them safely. Saving and loading through the engine is the checkpoint callback's
(`orchestrator.trial.callbacks.checkpoint`).

    RUN_DIR/checkpoints/stepN/   one DeepSpeed checkpoint (tag `stepN`), its client state being the
                                 trainer's (`Trainer.state_dict`) plus `config_hash`
    RUN_DIR/checkpoints/stepN/COMPLETE   written once the folder is whole and every metric point
                                 up to step N is in the store: the folder's manifest (every file's
                                 size and sha256, `storage.folders`' one format, with the step);
                                 only such folders are resumed from
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from orchestrator import storage
from orchestrator.storage import Damaged, Location, UnsafeName, folders

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
    """Write the checkpoint's manifest as its COMPLETE marker (the same file its upload publishes)."""
    folder = checkpoint_dir(run_dir) / tag(step)
    manifest = folders.Manifest(folders.manifest_of(folder, skip=(COMPLETE,)), extra={"step": step})
    storage.write_json(folder / COMPLETE, manifest.to_dict(), indent=1)


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


# ---- a runs folder on an object store ------------------------------------------------------------
# The trial trains in a local scratch folder; REMOTE (a Location) is the truth. A checkpoint is
# published with the one protocol of `storage.folders`: its files, then COMPLETE, the manifest
# (each file's size and sha256, and the step), LAST. A remote checkpoint without COMPLETE, whose
# manifest names anything outside its folder, or whose files do not match it, is not trusted,
# and the previous whole one is used.


def upload_checkpoint(run_dir: Path, remote: Location, step: int) -> None:
    """Publish the local whole checkpoint of `step` under REMOTE/checkpoints/, COMPLETE last.
    Store errors propagate (the caller retries)."""
    local = checkpoint_dir(run_dir) / tag(step)
    folders.publish(local, remote.child("checkpoints", tag(step)), name=COMPLETE, extra={"step": step})


def remote_checkpoints(remote: Location) -> tuple[list[int], list[int]]:
    """(steps with a COMPLETE marker, every step with any object), each ascending (one listing)."""
    whole, seen = set(), set()
    for rel in remote.child("checkpoints").files():
        head, _, rest = rel.partition("/")
        if head.startswith("step") and head[4:].isdigit():
            seen.add(int(head[4:]))
            if rest == COMPLETE:
                whole.add(int(head[4:]))
    return sorted(whole), sorted(seen)


def download_latest(remote: Location, run_dir: Path, say=None) -> str | None:
    """Replace the local checkpoints with REMOTE's newest whole one (verified against its manifest,
    nothing written outside its folder); a damaged or partial one is skipped for the previous;
    its tag, or None when none is whole."""
    folder = checkpoint_dir(run_dir)
    shutil.rmtree(folder, ignore_errors=True)  # the store is the truth, not what an earlier attempt left here
    whole, _ = remote_checkpoints(remote)
    for step in reversed(whole):
        src = remote.child("checkpoints", tag(step))
        try:
            manifest = folders.fetch(src, folder / tag(step), name=COMPLETE)
        except (FileNotFoundError, Damaged, UnsafeName) as err:  # partial or damaged; other errors: the store failed
            if say is not None:
                say(f"checkpoint {src} is not whole ({' '.join(str(err).split())[:200]}); using the previous one")
            shutil.rmtree(folder / tag(step), ignore_errors=True)
            continue
        storage.write_json(folder / tag(step) / COMPLETE, manifest.to_dict())
        return tag(step)
    return None


def prune_remote(remote: Location, keep: int) -> None:
    """REMOTE's counterpart of `prune_checkpoints`: the newest `keep` whole checkpoints stay; older
    ones and partial leftovers older than the newest whole one go."""
    whole, seen = remote_checkpoints(remote)
    if not whole:
        return
    kept = set(whole[-keep:])
    for step in seen:
        if step not in kept and step < whole[-1]:
            remote.child("checkpoints", tag(step)).delete_tree()
