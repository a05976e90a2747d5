"""Files that are whole or absent, and one process at a time: the disciplines every room shares,
on a local disk and on an object store (a leaf: it imports no other gatesweep package).

- `atomic`: `write_bytes` / `write_text` / `write_json` / `write_stream` write a temporary file in
  the target's folder, fsync it and rename it over the target, so a reader sees the old file or
  the new one, never half of one; `publish_folder` builds a folder beside its final place and
  renames it in, the first publisher winning a race. A failure, KeyboardInterrupt included,
  leaves the target as it was and removes the temporary file or folder.
- `locks`: `FileLock`, an exclusive `flock` (blocking or not) whose holder writes who it is into
  the lock file, for the message of whoever finds it taken; the kernel drops it when its holder
  dies, SIGKILL included.
- `location`: `Location`, one interface over a local folder or an object-store URI (s3://, gs://,
  abfs://: pyarrow.fs); an object is written in one PUT, so it too is whole or absent.
- `remote`: what a runs folder or cache on an object store needs beside it: each machine's scratch
  folder (GATESWEEP_SCRATCH), writes retried through an outage, the one-driver lock as a
  conditional create with a heartbeat, AWS keys kept out of Ray's runtime_env, and the one check
  that a store can be used (`store_problem`).
"""

from .atomic import publish_folder, remove_leftovers, write_bytes, write_json, write_stream, write_text
from .locks import FileLock, describe_holder

__all__ = [
    "FileLock",
    "describe_holder",
    "publish_folder",
    "remove_leftovers",
    "write_bytes",
    "write_json",
    "write_stream",
    "write_text",
]
