"""The typed errors of the storage room: what went wrong is the exception's type, never words to
look for in its message.

- `FileNotFoundError`, `PermissionError` (the built-in ones): the object or folder is not there;
  the store refuses these credentials or this operation.
- `StoreUnreachable` (a `ConnectionError`): nothing answers, a request timed out, the store
  answered 5xx or asked to slow down. Worth a retry (`storage.retry.transient`).
- `NotAStore`: something answers at the endpoint, but not in the store's protocol (an HTML page, a
  proxy's error): no retry helps; the message names the endpoint.
- `UnsafeName`: a name a store, manifest, index, lock or state file gives that would leave its
  folder (`..`, an absolute path, a link); refused before anything is written.
- `BadLocation`: a runs folder or cache written like a URI that no store gatesweep opens backs
  (`s3:/b/p`, `s3a://b/p`, `gcs:/b`, `scheme:rest`); refused before anything is created.
- `Damaged`: a folder whose files do not match its manifest (a size, a sha256, a file missing).
"""

from __future__ import annotations


class StoreUnreachable(ConnectionError):
    """The store did not answer (in time), or answered that it cannot serve now (5xx, SlowDown)."""


class NotAStore(OSError):
    """The endpoint answers, but not as the store it should be (e.g. an HTML page to every request)."""


class UnsafeName(ValueError):
    """A name given by a store or a file that would leave the folder it belongs to."""


class BadLocation(ValueError):
    """A folder or URI, as a user wrote it, that gatesweep cannot open (the message says why)."""


class Damaged(ValueError):
    """A folder whose files do not match its manifest."""


__all__ = ["BadLocation", "Damaged", "NotAStore", "StoreUnreachable", "UnsafeName"]
