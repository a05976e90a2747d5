"""The one storage API: files whole or absent, one holder at a time, on a local disk and on an object store.

Files that are whole or absent, one holder at a time, on a local disk and on an object store:
the one storage API every room uses (it imports no other gatesweep package but `orchestrator.runtime`'s pid check).

- `atomic`: `write_bytes` / `write_text` / `write_json` / `write_stream` replace a local file
  through a fsynced temporary sibling; `publish_folder` renames a folder built beside its place in.
- `location`: `Location`, one interface over a local folder or an object-store URI; `parse` is
  the edge where a user's text becomes one (`BadLocation` for a URI no store backs).
- `folders`: a folder published with ONE manifest of sizes and sha256 written last, and fetched
  verified (trial checkpoints, the data cache); `owned`: a user's folder in which gatesweep
  replaces only its own files (the report's --out).
- `lease`: one holder at a time: the file lock locally (`locks.FileLock`), a conditional create
  with a heartbeat on S3.
- `retry`: the one retry policy (typed transient errors, one backoff schedule).
- `s3`: the one reader of the S3 settings, the one client, S3's answers as typed errors.
- `names`: names given by a store or a file stay inside their folder.
- `scratch`: each machine's local folder beside a remote one; `usable`: can a store be used.
- `errors`: the typed errors.
"""

from .atomic import publish_folder, remove_leftovers, write_bytes, write_json, write_stream, write_text
from .errors import BadLocation, Damaged, NotAStore, StoreUnreachable, UnsafeName
from .location import Location
from .locks import FileLock, describe_holder
from .retry import retried

__all__ = [
    "BadLocation",
    "Damaged",
    "FileLock",
    "Location",
    "NotAStore",
    "StoreUnreachable",
    "UnsafeName",
    "describe_holder",
    "publish_folder",
    "remove_leftovers",
    "retried",
    "write_bytes",
    "write_json",
    "write_stream",
    "write_text",
]
