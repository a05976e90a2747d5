"""One exclusive file lock: `flock` on a lock file, blocking or not, with the holder's identity.

The kernel releases an flock when the process holding it dies however it dies (SIGKILL included),
so a stale lock cannot exist on a local file system: whoever comes next finds it free. The holder
writes `{"pid", "host", "started", **info}` into the file once it has the lock (and empties it on
release); that content only serves the message of whoever finds the lock taken. On a network file
system without working `flock`, locking is advisory at best.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import Any


class FileLock:
    """An exclusive lock on `path` (created, with its folder, if missing). `info`: extra fields the
    holder records beside its pid, host and start time. `lost` and `took_over` are there for the
    one lease interface (`storage.lease`): the kernel never hands a held flock to another."""

    lost = False
    took_over: dict | None = None

    def __init__(self, path: str | Path, **info: Any):
        self.path = Path(path)
        self.info = info
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, blocking: bool = True) -> bool:
        """Take the lock: wait for it (`blocking`), or return False at once when another holds it."""
        if self._fd is not None:
            raise RuntimeError(f"{self.path}: this lock is already held by this object")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # not inherited by child processes (PEP 446); a link in its place is refused (ELOOP), never
        # followed: the holder truncates and writes the file it opens
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        record = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(), **self.info}
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(record, default=str).encode(), 0)
        except OSError:  # a full disk: the lock holds all the same, only the message is poorer
            pass
        self._fd = fd
        return True

    def holder(self) -> dict:
        """What the current holder wrote into the lock file ({} when nothing readable is there)."""
        try:
            with open(self.path, "rb") as fh:
                data = json.loads(fh.read(65536).decode() or "{}")
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)
        except OSError:
            pass
        finally:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def describe_holder(holder: dict, default: str = "another process") -> str:
    """`pid 123 on host h, started 2026-01-02 03:04:05` for a holder record; `default` without one."""
    if not holder.get("pid"):
        return default
    started = holder.get("started")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)) if isinstance(started, (int, float)) else "?"
    return f"pid {holder.get('pid')} on host {holder.get('host', '?')}, started {when}"
