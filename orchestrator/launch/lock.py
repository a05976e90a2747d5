"""One driver per sweep: an exclusive lock on the sweep's state folder.

`flock` on RUNS/sweeps/NAME/driver.lock, held for the driver's whole life. The kernel releases it
when the process dies however it dies (SIGKILL included), so a stale lock cannot exist on a local
file system: a second driver finds it free and takes it over. The file's content (pid, host,
start time) only serves the refusal message. On a network file system without working `flock`,
locking is advisory at best; one driver per sweep is then the user's to keep.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path

from orchestrator.spec.files import UserError


class SweepLock:
    def __init__(self, folder: Path, name: str):
        self.path = Path(folder) / "driver.lock"
        self.name = name
        self._fd: int | None = None

    def acquire(self) -> SweepLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read(fd)
            os.close(fd)
            who = (
                (
                    f"driver pid {holder.get('pid')} on host {holder.get('host')}, started "
                    f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(holder.get('started', 0)))}"
                )
                if holder
                else "another driver"
            )
            raise UserError(
                f"sweep {self.name!r} is already running ({who}; lock {self.path}); wait for it, or stop it and `gatesweep resume` it"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}).encode())
        os.fsync(fd)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, 0)
            finally:
                os.close(self._fd)  # closing drops the flock
                self._fd = None

    def __enter__(self) -> SweepLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _read(fd: int) -> dict:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        data = json.loads(os.read(fd, 4096).decode() or "{}")
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}
