"""One driver per sweep: the lease (`orchestrator.storage.lease`) on RUNS/sweeps/NAME/driver.lock.

On a local folder it is an `flock`, held for the driver's whole life; the kernel releases it when
the process dies however it dies (SIGKILL included), so a stale lock cannot exist on a local file
system: a second driver finds it free and takes it over. The file's content (pid, host, start
time) only serves the refusal message. On a network file system without working `flock`, locking
is advisory at best.

On S3 (`--runs-dir s3://...`) it is the object driver.lock created only if absent
(`If-None-Match: *`), holding pid, host, start and a heartbeat the driver refreshes every 15 s. A
second driver is refused naming the holder; a lock whose heartbeat is older than 90 s on the
store's clock (`GATESWEEP_LOCK_STALE_S`), or whose holder is a dead pid on this same host, is
taken over. Other object stores (gs://, abfs://) have no conditional create through pyarrow:
there the lock is not enforced and a warning says so.
"""

from __future__ import annotations

from orchestrator.core.errors import UserError
from orchestrator.storage import Location, describe_holder
from orchestrator.storage.lease import Unenforced, lease_for


class SweepLock:
    def __init__(self, folder: Location, name: str, say=print):
        self.loc = folder.child("driver.lock")
        self.path = str(self.loc)
        self.name, self.say = name, say
        self._lock = lease_for(self.loc)

    def acquire(self) -> SweepLock:
        if isinstance(self._lock, Unenforced):
            self.say(f"warning: {self._lock.warning}; one driver per sweep is yours to keep")
            return self
        try:
            taken = self._lock.acquire(blocking=False)
        except (OSError, ValueError) as err:  # the store refused or did not answer (typed by storage.s3)
            raise UserError(f"{self.path}: the driver lock cannot be taken ({type(err).__name__}: {str(err)[:200]})") from None
        if not taken:
            who = describe_holder(self._lock.holder(), "another driver")
            who = f"driver {who}" if who.startswith("pid ") else who
            raise UserError(
                f"sweep {self.name!r} is already running ({who}; lock {self.path}); wait for it, or stop it and `gatesweep resume` it"
            )
        stale = self._lock.took_over
        if stale:
            self.say(f"took over the lock of sweep {self.name!r} from {describe_holder(stale, 'a lost driver')}: {stale.get('why')}")
        return self

    @property
    def lost(self) -> bool:
        """Another driver took this lock over (an object-store lock whose heartbeats stopped)."""
        return self._lock.lost

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> SweepLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
