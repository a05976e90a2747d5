"""Atomic writes: a file or a folder appears whole or not at all.

A file is written to a temporary sibling `.NAME.PID.RANDOM.tmp` (same folder, so the rename never
crosses file systems), flushed and fsynced, then `os.replace`d over the target, and the folder is
fsynced so the rename itself survives a crash. A folder is built in a staging sibling of the same
form, every file in it fsynced, then renamed into place. On any failure (a full disk, a writer's
exception, KeyboardInterrupt) the temporary file or folder is removed and the error re-raised; the
target keeps its old content. Only a process killed outright (SIGKILL, power loss) leaves a
temporary sibling behind, which `remove_leftovers` deletes for callers that hold a lock on the
target.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

TMP_SUFFIX = ".tmp"


def _sibling(path: Path) -> Path:
    """A fresh temporary name beside `path` (hidden, with the writer's pid for whoever finds it)."""
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}{TMP_SUFFIX}")


def _fsync_folder(folder: Path) -> None:
    """Make a rename in `folder` durable (a no-op where the file system cannot fsync folders)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_stream(path: str | Path, write: Callable[[BinaryIO], Any]) -> None:
    """Atomically replace `path` with what `write(fh)` writes into a binary file object (e.g.
    `lambda fh: torch.save(obj, fh)`, `lambda fh: np.savez(fh, ...)`)."""
    path = Path(path)
    while True:
        tmp = _sibling(path)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies, as for any new file
            break
        except FileExistsError:  # a name drawn twice: draw again
            continue
    try:
        with open(fd, "wb", closefd=False) as fh:
            write(fh)
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_folder(path.parent)


def write_bytes(path: str | Path, data: bytes) -> None:
    """Atomically replace `path` with `data`."""
    write_stream(path, lambda fh: fh.write(data))


def write_text(path: str | Path, text: str, encoding: str = "utf-8") -> None:
    """Atomically replace `path` with `text`."""
    write_bytes(path, text.encode(encoding))


def write_json(path: str | Path, obj: Any, **dumps: Any) -> None:
    """Atomically replace `path` with `json.dumps(obj, **dumps)` (serialised before anything is
    written: an object JSON cannot hold leaves the old file and no temporary one)."""
    write_text(path, json.dumps(obj, **dumps))


def _fsync_tree(root: Path) -> None:
    for folder, _, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_folder(Path(folder))


def publish_folder(dest: str | Path, build: Callable[[Path], Any]) -> bool:
    """Build a folder with `build(staging)` in a staging sibling of `dest`, then rename it to `dest`
    in one step: readers see no folder or the whole one. True when this call published it; False
    when `dest` was already there (another process published first: theirs is kept, this one's
    removed). The staging folder is removed on any failure, KeyboardInterrupt included."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = _sibling(dest)
    staging.mkdir()
    try:
        build(staging)
        _fsync_tree(staging)
        try:
            os.rename(staging, dest)  # onto an existing non-empty folder this fails: nothing is merged
        except OSError as err:
            if err.errno in (errno.ENOTEMPTY, errno.EEXIST) and dest.is_dir():
                shutil.rmtree(staging, ignore_errors=True)
                return False
            raise
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _fsync_folder(dest.parent)
    return True


def remove_leftovers(dest: str | Path) -> list[Path]:
    """Delete the temporary siblings of `dest` left by writers that were killed outright (any pid:
    call it only while holding a lock that keeps other writers of `dest` out). The removed paths."""
    dest = Path(dest)
    removed = []
    for path in dest.parent.glob(f".{dest.name}.*{TMP_SUFFIX}"):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path)
    return removed
