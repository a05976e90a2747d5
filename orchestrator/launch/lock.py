"""One driver per sweep: an exclusive lock on the sweep's state folder.

`orchestrator.storage.FileLock` on RUNS/sweeps/NAME/driver.lock, held for the driver's whole life.
The kernel releases it when the process dies however it dies (SIGKILL included), so a stale lock
cannot exist on a local file system: a second driver finds it free and takes it over. The file's
content (pid, host, start time) only serves the refusal message. On a network file system without
working `flock`, locking is advisory at best; one driver per sweep is then the user's to keep.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.spec.files import UserError
from orchestrator.storage import FileLock, describe_holder


class SweepLock:
    def __init__(self, folder: Path, name: str):
        self.path = Path(folder) / "driver.lock"
        self.name = name
        self._lock = FileLock(self.path)

    def acquire(self) -> SweepLock:
        if not self._lock.acquire(blocking=False):
            who = describe_holder(self._lock.holder(), "another driver")
            who = f"driver {who}" if who.startswith("pid ") else who
            raise UserError(
                f"sweep {self.name!r} is already running ({who}; lock {self.path}); wait for it, or stop it and `gatesweep resume` it"
            )
        return self

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> SweepLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
