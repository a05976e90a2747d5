"""The one lease: a lock on a location, one holder at a time, across processes and machines.

`lease_for(location, **info)` gives, by where the lock lives:
- a local path: `FileLock` (an `flock`; the kernel drops it when its holder dies, however it dies);
- S3: `ObjectLock`, a conditional create (`PutObject` with `If-None-Match: *`). The holder
  refreshes its object every `heartbeat_s` with an `If-Match` overwrite of its own version; a
  waiter takes a lock over when it is stale, with an `If-Match` overwrite of the stale version,
  so of several waiters exactly one wins; the holder releases with an `If-Match` delete. Stale
  means not refreshed for `stale_s` on the *store's* clock (the object's Last-Modified against
  the answer's Date, with the second these headers round to counted against the takeover, so a
  live lock is never taken early), or held by a dead pid of this same host.
- another object store (no conditional create through pyarrow): `Unenforced`, which always
  acquires and says so once; callers whose correctness does not rest on the lock (the data
  cache: its publishers race safely) go on, the sweep lock warns.

Each has `acquire(blocking=False) -> bool`, `holder() -> dict`, `release()`, `held`, and
`lost` (another process took the lock over: the holder's heartbeat found its version replaced)
and `took_over` (the stale holder's record, with `why`, when this lock was taken over).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from email.utils import parsedate_to_datetime
from typing import Any

from orchestrator.runtime.pids import pid_alive

from . import s3
from .location import Location
from .locks import FileLock

HEARTBEAT_S = 15.0
"""How often a holder refreshes its lock object (GATESWEEP_LOCK_HEARTBEAT_S)."""
STALE_S = 90.0
"""A lock object not refreshed for this long (on the store's clock) belongs to a lost holder (GATESWEEP_LOCK_STALE_S)."""
CLOCK_STEP_S = 1.0
"""HTTP dates are whole seconds: the most a computed age can exceed the real one."""


def _env_seconds(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        return default
    return value if value > 0 else default


class ObjectLock:
    """A lease as an S3 object (the module's docstring). `acquire()` returns False when a live
    holder has it (`holder()` says who)."""

    def __init__(self, where: Location, *, heartbeat_s: float | None = None, stale_s: float | None = None, **info: Any):
        self.where = where
        self.bucket, _, self.key = where.path.partition("/")
        self.heartbeat_s = heartbeat_s or _env_seconds("GATESWEEP_LOCK_HEARTBEAT_S", HEARTBEAT_S)
        self.stale_s = stale_s or _env_seconds("GATESWEEP_LOCK_STALE_S", STALE_S)
        self.etag: str | None = None
        self.lost = False
        self.took_over: dict | None = None
        self._holder: dict = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._client = s3.client()
        self.record = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(), **info}

    @property
    def held(self) -> bool:
        return self.etag is not None

    def _body(self) -> bytes:
        return json.dumps({**self.record, "heartbeat": time.time()}, default=str).encode()

    def _put(self, **condition: str) -> str:
        """Write this holder's record under `condition`; its ETag. Typed errors, except a lost
        condition, which is botocore's ClientError (`s3.precondition_failed`)."""
        try:
            return self._client.put_object(Bucket=self.bucket, Key=self.key, Body=self._body(), **condition)["ETag"]
        except Exception as err:
            if s3.precondition_failed(err):
                raise
            raise s3.translate(err, f"{self.where}: writing the lock") from None

    def _read(self) -> tuple[dict, str, float] | None:
        """The holder's record, the object's ETag and its age in seconds on the store's clock."""
        try:
            r = self._client.get_object(Bucket=self.bucket, Key=self.key)
            data = r["Body"].read(65536)
        except Exception as err:
            typed = s3.translate(err, f"{self.where}: reading the lock")
            if isinstance(typed, FileNotFoundError):
                return None
            raise typed from None
        try:
            found = json.loads(data.decode() or "{}")
        except ValueError:
            found = {}
        date = r.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
        now = parsedate_to_datetime(date).timestamp() if date else time.time()
        return (found if isinstance(found, dict) else {}), r["ETag"], now - r["LastModified"].timestamp()

    def stale(self, holder: dict, age: float) -> str:
        """Why the lock of `holder`, last written `age` s ago, can be taken over ('' when it cannot)."""
        if age - CLOCK_STEP_S > self.stale_s:
            return f"its heartbeat is {age:.0f} s old (stale after {self.stale_s:.0f} s)"
        pid = holder.get("pid")
        if holder.get("host") == socket.gethostname() and isinstance(pid, int) and pid != os.getpid() and not pid_alive(pid):
            return f"its pid {pid} no longer runs on this host"
        return ""

    def acquire(self, blocking: bool = False) -> bool:
        """Take the lock now (True), or False when a live holder has it; `blocking` is not
        offered on a store (a caller waits in its own loop, with its own reason to stop)."""
        for _ in range(5):
            try:
                self.etag = self._put(IfNoneMatch="*")
                break
            except Exception as err:
                if not s3.precondition_failed(err):
                    raise
            found = self._read()
            if found is None:
                continue  # released meanwhile
            holder, etag, age = found
            why = self.stale(holder, age)
            if not why:
                self._holder = holder
                return False
            try:
                self.etag = self._put(IfMatch=etag)
            except Exception as err:
                if not s3.precondition_failed(err):
                    raise
                continue  # another waiter took it over first: look again
            self.took_over = {**holder, "why": why}
            break
        else:
            return False
        self.lost = False
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name="gatesweep-lock-heartbeat", daemon=True)
        self._thread.start()
        return True

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            try:
                self.etag = self._put(IfMatch=self.etag or "")
            except FileNotFoundError:
                self.lost = True
                return
            except Exception as err:
                if s3.precondition_failed(err):
                    self.lost = True
                    return
                # the store is unreachable: try again at the next beat

    def holder(self) -> dict:
        if self._holder:
            return self._holder
        try:
            found = self._read()
        except OSError:
            return {}
        return found[0] if found else {}

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        if self.etag is None:
            return
        try:
            if not self.lost:
                self._client.delete_object(Bucket=self.bucket, Key=self.key, IfMatch=self.etag)
        except Exception:
            pass  # taken over, or the store is down: the lock goes stale and is taken over
        finally:
            self.etag = None

    def __enter__(self) -> ObjectLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class Unenforced:
    """The lease of a store without conditional writes: always acquired; `warning` says so."""

    lost = False
    took_over: dict | None = None

    def __init__(self, where: Location, **info: Any):
        self.where, self.held = where, False
        self.warning = f"{where}: this object store has no conditional create here; one holder at a time is not enforced"

    def acquire(self, blocking: bool = False) -> bool:
        self.held = True
        return True

    def holder(self) -> dict:
        return {}

    def release(self) -> None:
        self.held = False

    def __enter__(self) -> Unenforced:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


Lease = FileLock | ObjectLock | Unenforced


def lease_for(where: Location, **kwargs: Any) -> Lease:
    """The lease on `where` (module's docstring); `kwargs`: the holder's extra fields, and for
    S3 `heartbeat_s` / `stale_s`."""
    if where.local is not None:
        for key in ("heartbeat_s", "stale_s"):
            kwargs.pop(key, None)
        return FileLock(where.local, **kwargs)
    if where.scheme == "s3":
        return ObjectLock(where, **kwargs)
    return Unenforced(where, **kwargs)
