"""Can a store be used? One check before anything is written: the runs folder's preflight reads
only (`problem`), the data cache also writes, reads back and deletes one object (`write_problem`).
Each answer is a few words naming the store and the reason, without a credential."""

from __future__ import annotations

import os
import secrets
import socket

from . import s3
from .location import Location


def problem(loc: Location) -> str | None:
    """Why the object store behind `loc` cannot be used (no credentials, an endpoint where nothing
    answers or something that is not S3 answers, a bucket that does not exist, credentials the
    store refuses), or None; None for a local folder. It reads only, a few seconds at most."""
    if loc.local is not None:
        return None
    bucket, _, key = loc.path.partition("/")
    if loc.scheme == "s3":
        return s3.problem(bucket, key)
    try:
        there = Location.parse(f"{loc.scheme}://{bucket}").exists()
    except Exception as err:  # pyarrow's errors for gs://, abfs://: OSError, ValueError, ArrowInvalid
        return f"the object store cannot be used ({type(err).__name__}: {' '.join(str(err).split())[:200]})"
    return None if there else f"bucket {bucket!r} does not exist"


def write_problem(root: Location) -> str | None:
    """`problem`, then an object written under `root`, read back and deleted."""
    found = problem(root)
    if found:
        return found
    probe = root.child(f".probe-{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}")
    try:
        probe.write_bytes(b"gatesweep")
        if probe.read_bytes(limit=64) != b"gatesweep":
            return "an object written could not be read back"
        probe.delete()
    except (OSError, ValueError) as err:
        return f"the object store refuses a write or read ({' '.join(str(err).split())[:200]})"
    return None
