"""What a runs folder on an object store needs beside `Location`: the local scratch folder every
process works in, writes retried through a store that is down for a while, and the one-driver
lock as a conditional create.

- `scratch_root()`: `$GATESWEEP_SCRATCH`, default `tempfile.gettempdir()/gatesweep-scratch`; each
  process keys its folder under it by sweep and trial. The remote folder is the truth; scratch is
  a cache that may be wiped between runs.
- `retried(fn, what)`: calls `fn` again after an `OSError` (pyarrow's and boto3's network errors are
  OSErrors) with exponential backoff (1 s doubling to 30 s) until `GATESWEEP_STORE_RETRY_S`
  (default 300) seconds have passed, then raises the last error. A missing object is not retried.
- `ObjectLock`: S3's conditional create (`PutObject` with `If-None-Match: *`), the holder's
  heartbeat an `If-Match` overwrite of its own object, a takeover an `If-Match` overwrite of the
  stale object and the release an `If-Match` delete, so of two drivers racing for a lock exactly
  one wins. Staleness is judged on the store's clock (the object's Last-Modified against the
  response's Date), not the drivers'.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, TypeVar

from .location import Location

T = TypeVar("T")

SCRATCH_ENV = "GATESWEEP_SCRATCH"
RETRY_ENV = "GATESWEEP_STORE_RETRY_S"
HEARTBEAT_S = 15.0
"""How often a driver refreshes its lock object."""
STALE_S = 90.0
"""A lock object not refreshed for this long (on the store's clock) belongs to a lost driver."""


def scratch_root() -> Path:
    return Path(os.environ.get(SCRATCH_ENV) or Path(tempfile.gettempdir()) / "gatesweep-scratch").expanduser().resolve()


def scratch_for(remote: Location, *keys: str) -> Path:
    """The local folder of `remote` under the scratch root: `keys` (sweep, trial...) when given,
    else a name derived from the URI."""
    if keys:
        return scratch_root().joinpath(*(k.strip("/").replace("..", "_") for k in keys if k))
    import hashlib

    return scratch_root() / "by-uri" / hashlib.sha256(remote.uri.encode()).hexdigest()[:16]


def retry_budget() -> float:
    try:
        return max(0.0, float(os.environ.get(RETRY_ENV, "300")))
    except ValueError:
        return 300.0


def retried(fn: Callable[[], T], what: str, *, say: Callable[[str], None] | None = None, budget: float | None = None) -> T:
    """`fn()`, retried after an OSError with backoff for `budget` seconds (`GATESWEEP_STORE_RETRY_S`)."""
    budget = retry_budget() if budget is None else budget
    deadline, wait, tries = time.monotonic() + budget, 1.0, 0
    while True:
        try:
            return fn()
        except FileNotFoundError:
            raise
        except OSError as err:
            tries += 1
            if time.monotonic() + wait > deadline:
                raise
            if say is not None:
                say(f"{what}: {type(err).__name__}: {str(err).strip()[:160]}; retry {tries} in {wait:.0f} s")
            time.sleep(wait)
            wait = min(wait * 2, 30.0)


# ---- credentials kept out of Ray's runtime_env -------------------------------------------------------
SECRET_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")
"""Ray Tune copies these from the driver's environment into every trial actor's runtime_env
(ray/tune/execution/class_cache.py), which Ray's runtime_env agent writes to its log in clear."""
_withheld: dict[str, str] = {}


def withheld_credentials() -> dict[str, str]:
    """The AWS keys `credentials_withheld` took out of the environment ({} outside it)."""
    return dict(_withheld)


class credentials_withheld:
    """`with credentials_withheld():` takes the AWS keys out of os.environ (so Ray Tune cannot put
    them into a runtime_env) while this process keeps using them for its own S3 calls (`Location`,
    `s3_client`); they are back in os.environ afterwards. Workers of a local Ray inherit them from
    the raylet, started before; nodes of a joined cluster take them from their own environment."""

    def __enter__(self) -> credentials_withheld:
        for key in SECRET_ENV:
            if key in os.environ:
                _withheld[key] = os.environ.pop(key)
        return self

    def __exit__(self, *exc: object) -> None:
        for key, value in _withheld.items():
            os.environ.setdefault(key, value)
        _withheld.clear()


# ---- S3 -------------------------------------------------------------------------------------------
def s3_client(*, connect_timeout: float = 5.0, read_timeout: float = 20.0, attempts: int = 2):
    """A boto3 S3 client from the standard chain, the endpoint from AWS_ENDPOINT_URL(_S3)."""
    import boto3
    from botocore.config import Config

    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None
    region = os.environ.get("AWS_DEFAULT_REGION") or os.environ.get("AWS_REGION") or ("us-east-1" if endpoint else None)
    config = Config(connect_timeout=connect_timeout, read_timeout=read_timeout, retries={"max_attempts": attempts, "mode": "standard"})
    held = withheld_credentials()
    keys = {
        "aws_access_key_id": held.get("AWS_ACCESS_KEY_ID"),
        "aws_secret_access_key": held.get("AWS_SECRET_ACCESS_KEY"),
        "aws_session_token": held.get("AWS_SESSION_TOKEN") or held.get("AWS_SECURITY_TOKEN"),
    }
    return boto3.session.Session(**{k: v for k, v in keys.items() if v}).client(
        "s3", endpoint_url=endpoint, region_name=region, config=config
    )


def bucket_key(loc: Location) -> tuple[str, str]:
    bucket, _, key = loc.path.partition("/")
    return bucket, key


def _code(err: Exception) -> str:
    response = getattr(err, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def _status(err: Exception) -> int:
    response = getattr(err, "response", None) or {}
    return int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


def _precondition_failed(err: Exception) -> bool:
    return _status(err) in (409, 412) or _code(err) in ("PreconditionFailed", "ConditionalRequestConflict")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ObjectLock:
    """The one-driver lock as an S3 object (see the module's docstring). `acquire()` returns False
    when a live holder has it (`holder()` says who); `lost` turns True when another driver took
    the lock over (a heartbeat found the object changed)."""

    def __init__(self, where: Location, *, heartbeat_s: float | None = None, stale_s: float | None = None, **info: Any):
        self.where = where
        self.bucket, self.key = bucket_key(where)
        self.heartbeat_s = heartbeat_s or float(os.environ.get("GATESWEEP_LOCK_HEARTBEAT_S", HEARTBEAT_S))
        self.stale_s = stale_s or float(os.environ.get("GATESWEEP_LOCK_STALE_S", STALE_S))
        self.info = info
        self.etag: str | None = None
        self.lost = False
        self.took_over: dict | None = None
        """The stale holder's record when this lock was taken over from it."""
        self._holder: dict = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._client = s3_client()
        self.record = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(), **info}

    @property
    def held(self) -> bool:
        return self.etag is not None

    def _body(self) -> bytes:
        return json.dumps({**self.record, "heartbeat": time.time()}, default=str).encode()

    def _read(self) -> tuple[dict, str, float] | None:
        """The holder's record, the object's ETag and its age in seconds on the store's clock."""
        try:
            r = self._client.get_object(Bucket=self.bucket, Key=self.key)
        except Exception as err:
            if _code(err) in ("NoSuchKey", "404") or _status(err) == 404:
                return None
            raise
        try:
            data = json.loads(r["Body"].read(65536).decode() or "{}")
        except ValueError:
            data = {}
        date = r.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
        now = parsedate_to_datetime(date).timestamp() if date else time.time()
        age = now - r["LastModified"].timestamp()
        return (data if isinstance(data, dict) else {}), r["ETag"], age

    def stale(self, holder: dict, age: float) -> str:
        """Why the lock of `holder`, last written `age` s ago, can be taken over ('' when it cannot)."""
        if age > self.stale_s:
            return f"its heartbeat is {age:.0f} s old (stale after {self.stale_s:.0f} s)"
        pid = holder.get("pid")
        if holder.get("host") == socket.gethostname() and isinstance(pid, int) and pid != os.getpid() and not pid_alive(pid):
            return f"its pid {pid} no longer runs on this host"
        return ""

    def acquire(self) -> bool:
        for _ in range(5):
            try:
                r = self._client.put_object(Bucket=self.bucket, Key=self.key, Body=self._body(), IfNoneMatch="*")
                self.etag = r["ETag"]
                break
            except Exception as err:
                if not _precondition_failed(err):
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
                r = self._client.put_object(Bucket=self.bucket, Key=self.key, Body=self._body(), IfMatch=etag)
            except Exception as err:
                if not _precondition_failed(err):
                    raise
                continue  # another driver took it over first: look again
            self.etag, self.took_over = r["ETag"], {**holder, "why": why}
            break
        else:
            return False
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name="gatesweep-lock-heartbeat", daemon=True)
        self._thread.start()
        return True

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            try:
                r = self._client.put_object(Bucket=self.bucket, Key=self.key, Body=self._body(), IfMatch=self.etag)
                self.etag = r["ETag"]
            except Exception as err:
                if _precondition_failed(err) or _status(err) == 404:
                    self.lost = True
                    return
                # the store is unreachable: try again at the next beat

    def holder(self) -> dict:
        if self._holder:
            return self._holder
        try:
            found = self._read()
        except Exception:
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


# ---- is the store usable? ----------------------------------------------------------------------


def store_problem(loc: Location) -> str | None:
    """Why the object store behind `loc` cannot be used, in a few words (no credentials, an
    endpoint where nothing answers, a bucket that does not exist, credentials the store refuses),
    or None. It reads only (S3: one HeadBucket, no retries, a few seconds at most), and no reason
    holds a credential: boto3's errors name the endpoint and the operation, never the keys. The
    one check of the runs folder's preflight and of the data cache on object storage."""
    bucket = loc.path.split("/", 1)[0]
    if not bucket:
        return "no bucket in the URI (expected e.g. s3://bucket/prefix)"
    return _s3_problem(bucket) if loc.uri.startswith("s3://") else _pyarrow_problem(loc, bucket)


def _s3_problem(bucket: str) -> str | None:
    import boto3
    import botocore.exceptions as bx

    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or "the default AWS endpoint"
    try:
        held = withheld_credentials()
        if not held.get("AWS_ACCESS_KEY_ID") and boto3.session.Session().get_credentials() is None:  # the chain found nothing
            raise bx.NoCredentialsError()
        s3_client(connect_timeout=3, read_timeout=5, attempts=1).head_bucket(Bucket=bucket)
    except bx.NoCredentialsError:
        return "no S3 credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or use an instance role)"
    except (bx.EndpointConnectionError, bx.ConnectTimeoutError, bx.ReadTimeoutError) as err:
        return f"the object store at {endpoint} does not answer ({type(err).__name__})"
    except bx.ClientError as err:
        status = int(err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        code = str(err.response.get("Error", {}).get("Code", ""))
        if status == 404 or code in ("404", "NoSuchBucket"):
            return f"bucket {bucket!r} does not exist at {endpoint}"
        if status in (401, 403):
            return f"the object store at {endpoint} refuses these credentials for bucket {bucket!r} (HTTP {status})"
        return f"the object store at {endpoint} answered HTTP {status} {code}"
    except (bx.BotoCoreError, ValueError) as err:  # a malformed endpoint URL, a broken profile
        return f"the object store cannot be used ({type(err).__name__}: {str(err)[:160]})"
    return None


def _pyarrow_problem(loc: Location, bucket: str) -> str | None:
    from pyarrow import fs

    try:
        info = loc.fs.get_file_info(bucket)
    except Exception as err:  # pyarrow's errors for gs://, abfs://: OSError, ValueError, ArrowInvalid
        return f"the object store cannot be used ({type(err).__name__}: {str(err).strip()[:200]})"
    if info.type == fs.FileType.NotFound:
        return f"bucket {bucket!r} does not exist"
    return None
