"""Files that are whole or absent, and one process at a time: the two disk disciplines every room
shares (a leaf: the standard library only).

- `atomic`: `write_bytes` / `write_text` / `write_json` / `write_stream` write a temporary file in
  the target's folder, fsync it and rename it over the target, so a reader sees the old file or
  the new one, never half of one; `publish_folder` builds a folder beside its final place and
  renames it in, the first publisher winning a race. A failure, KeyboardInterrupt included,
  leaves the target as it was and removes the temporary file or folder.
- `locks`: `FileLock`, an exclusive `flock` (blocking or not) whose holder writes who it is into
  the lock file, for the message of whoever finds it taken; the kernel drops it when its holder
  dies, SIGKILL included.
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
