"""Each machine's local scratch folder beside a folder on an object store.

`scratch_root()`: `$GATESWEEP_SCRATCH`, default `tempfile.gettempdir()/gatesweep-scratch`. A
process works there (memory maps, DeepSpeed's checkpoints, Tune's folder) and keys its folder by
sweep and trial; the remote folder is the truth and scratch a cache that may be wiped between runs.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from .location import Location
from .names import confined

SCRATCH_ENV = "GATESWEEP_SCRATCH"


def scratch_root() -> Path:
    return Path(os.environ.get(SCRATCH_ENV) or Path(tempfile.gettempdir()) / "gatesweep-scratch").expanduser().resolve()


def scratch_for(remote: Location, *keys: str) -> Path:
    """The local folder of `remote` under the scratch root: `keys` (sweep, trial...: plain names,
    `UnsafeName` otherwise) when given, else a name derived from the URI."""
    if keys:
        return confined(scratch_root(), "/".join(k for k in keys if k), "GATESWEEP_SCRATCH")
    return scratch_root() / "by-uri" / hashlib.sha256(remote.uri.encode()).hexdigest()[:16]
