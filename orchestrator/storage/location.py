"""A folder that is a local path or an object-store URI, behind one small interface.

`Location.parse("runs")`, `Location.parse("/shared/runs")`, `Location.parse("s3://bucket/prefix")`
(and the other stores pyarrow opens: gs://, abfs://, hdfs://) give the same operations: `child`,
`exists`, `read_bytes` / `write_bytes` (and the text and JSON forms), `list`, `files`,
`delete_tree`, `upload` / `download` of a local file or folder (the module's functions of the
same names, which the methods call), `open_read` for a stream.

`parse` is the edge where a user's text becomes a location: what looks like a URI but is none a
store backs (`s3:/b/p`, `s3a://b/p`, `s3:b/p`, `gcs:/b`, `scheme:rest`, an empty bucket, a `..`
part) is `BadLocation` with a hint, before anything is created; a local folder whose name has a
colon is written `./name:x`. `child` takes plain names only (`storage.names`): a name a store or
a file gives cannot lead out of its folder.

Whole or absent, on both kinds: a local write goes through `storage.atomic` (temporary sibling,
fsync, rename); an object-store write is one PUT, so a reader sees the old object or the new one.
A folder uploaded file by file is not atomic: `storage.folders` publishes one with its manifest
last. Errors are typed (`storage.errors`): `FileNotFoundError`, `PermissionError`,
`StoreUnreachable`, `NotAStore`; `str(location)` is the URI, never a credential.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from . import atomic
from .backends import Backend, LocalBackend, backend_for
from .errors import BadLocation
from .names import confined, safe_relpath

REMOTE_SCHEMES = ("s3", "gs", "gcs", "abfs", "abfss", "hdfs", "viewfs")
LOOKALIKES = {"s3a": "s3", "s3n": "s3", "gcs": "gs", "gs": "gs", "s3": "s3"}
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):(.*)", re.S)
STORES_TEXT = "object stores: s3://BUCKET/PREFIX, gs://, abfs://, hdfs://; a local folder whose name has a ':' is written ./NAME"


def _hint(scheme: str, rest: str) -> str:
    """'did you mean s3://b/p' for a near miss of a store's URI ('' when none is near)."""
    target = LOOKALIKES.get(scheme.lower(), scheme.lower() if scheme.lower() in REMOTE_SCHEMES else "")
    body = rest.lstrip("/")
    return f"; did you mean {target}://{body}?" if target and body else ""


def _remote(scheme: str, rest: str, text: str) -> tuple[str, str]:
    """(uri, path) of a store's URI, refusing one without a bucket or with a '.' or '..' part."""
    body = rest[2:].strip("/")
    bucket = body.split("/", 1)[0]
    if not bucket:
        raise BadLocation(f"{text}: no bucket in the URI (expected e.g. {scheme}://BUCKET/PREFIX)")
    parts = body.split("/")
    if any(p in (".", "..") for p in parts) or "" in parts:
        raise BadLocation(f"{text}: a URI with an empty, '.' or '..' part; write the prefix plainly")
    return f"{scheme}://{body}", body


def split(where: str | Path) -> tuple[str, str]:
    """(uri, path) of a local folder or a store's URI as `Location.parse` reads it; BadLocation."""
    text = str(where)
    if not text.strip() or "\x00" in text:
        raise BadLocation(f"{text!r}: not a folder name")
    m = _SCHEME.fullmatch(text) if not text.startswith(("/", ".", "~")) else None
    if m is None:
        p = str(Path(text).expanduser().resolve())
        return p, p
    scheme, rest = m.group(1).lower(), m.group(2)
    if scheme == "file" and rest.startswith("///"):
        p = str(Path(rest[2:]).resolve())
        return p, p
    if scheme in REMOTE_SCHEMES and rest.startswith("//") and not rest.startswith("///"):
        return _remote(scheme, rest, text)
    if scheme == "file":
        raise BadLocation(f"{text}: a file URI is file:///ABSOLUTE/PATH")
    raise BadLocation(f"{text}: not a folder or an object-store URI that gatesweep can open{_hint(scheme, rest)} ({STORES_TEXT})")


def is_remote(where: str | Path) -> bool:
    """Whether `where` names an object store (a URI of one of REMOTE_SCHEMES; no check beyond)."""
    text = str(where)
    return "://" in text and text.split("://", 1)[0].lower() in REMOTE_SCHEMES


@dataclass(frozen=True)
class Location:
    uri: str
    """As the user wrote it (a local path made absolute); what messages show."""
    path: str
    """The path inside the file system (`bucket/prefix/...` on a store, an absolute path locally)."""

    @classmethod
    def parse(cls, where: str | Path | Location) -> Location:
        """The location of a local folder or a store's URI; `BadLocation` (the module's docstring)."""
        if isinstance(where, Location):
            return where
        return cls(*split(where))

    # ---- naming -------------------------------------------------------------------------------
    @property
    def remote(self) -> bool:
        return is_remote(self.uri)

    @property
    def scheme(self) -> str:
        return self.uri.split("://", 1)[0] if self.remote else "file"

    @property
    def local(self) -> Path | None:
        """The local folder, or None on an object store."""
        return None if self.remote else Path(self.path)

    @property
    def name(self) -> str:
        return PurePosixPath(self.path).name

    def child(self, *parts: str) -> Location:
        """The location of `parts` under this one; each part is a plain name or names joined by
        '/' (`storage.names.safe_relpath`: `UnsafeName` for '..', an absolute path, ...)."""
        rel = "/".join(safe_relpath(p, self.uri) for p in parts if p != "")
        if not rel:
            return self
        if self.local is not None:
            p = str(Path(self.path, rel))
            return Location(p, p)
        return Location(f"{self.uri}/{rel}", f"{self.path}/{rel}")

    def __truediv__(self, part: str) -> Location:
        return self.child(part)

    def __str__(self) -> str:
        return self.uri

    # ---- the file system ------------------------------------------------------------------------
    def _fs(self) -> Backend:
        return backend_for(self.scheme, self.uri)

    def exists(self) -> bool:
        return self._fs().info(self.path)[0] != "none"

    def is_file(self) -> bool:
        return self._fs().info(self.path)[0] == "file"

    def size(self) -> int:
        return self._fs().info(self.path)[1]

    def list(self) -> list[str]:
        """The names directly under this folder (empty when it does not exist)."""
        return self._fs().list(self.path)

    def files(self) -> list[str]:
        """Every file under this folder, as paths relative to it (sorted; links left out)."""
        return self._fs().files(self.path)

    # ---- reading and writing ----------------------------------------------------------------------
    @contextlib.contextmanager
    def open_read(self) -> Iterator[BinaryIO]:
        """A binary stream of this file or object (`FileNotFoundError` when it is not there)."""
        with self._fs().open_read(self.path) as fh:
            yield fh

    def read_bytes(self, limit: int | None = None) -> bytes:
        """The whole object or file (ValueError when it is larger than `limit` bytes)."""
        if limit is not None:
            kind, size = self._fs().info(self.path)
            if kind == "file" and size > limit:
                raise ValueError(f"{self.uri}: {size:,} bytes, more than {limit:,}")
        with self.open_read() as fh:
            data = fh.read(limit + 1) if limit is not None else fh.read()
        if limit is not None and len(data) > limit:  # grown since it was looked at, or a device
            raise ValueError(f"{self.uri}: more than {limit:,} bytes")
        return data

    def read_text(self, limit: int | None = None) -> str:
        return self.read_bytes(limit).decode("utf-8")

    def read_json(self, limit: int | None = None) -> Any:
        return json.loads(self.read_text(limit))

    def write_bytes(self, data: bytes) -> None:
        self._fs().write(self.path, data)

    def write_text(self, text: str) -> None:
        self.write_bytes(text.encode("utf-8"))

    def write_json(self, obj: Any, **kwargs: Any) -> None:
        self.write_text(json.dumps(obj, **kwargs) + "\n")

    def delete(self) -> None:
        """Remove this file or object (nothing when it is absent)."""
        fs = self._fs()
        if fs.info(self.path)[0] == "file":
            fs.delete_file(self.path)

    def delete_tree(self) -> None:
        """Remove this folder and everything under it (nothing when it is absent)."""
        self._fs().delete_tree(self.path)

    # ---- copying between here and a local folder (the module's functions below) ----------------
    def upload(self, source: Path, *, skip: tuple[str, ...] = ()) -> list[str]:
        return upload(source, self, skip=skip)

    def download(self, target: Path) -> list[str]:
        return download(self, target)

    def copy_to(self, dest: Path) -> None:
        copy_to(self, dest)


def upload(source: Path, dest: Location, *, skip: tuple[str, ...] = ()) -> list[str]:
    """Copy a local file to the object `dest`, or a local folder's files under the folder `dest`
    (the relative paths copied, sorted; names in `skip` are left out, to be written last)."""
    source, fs = Path(source), dest._fs()
    if source.is_file():
        fs.put_file(source, dest.path)
        return [source.name]
    done = []
    for rel in LocalBackend().files(str(source)):
        if rel not in skip:
            fs.put_file(source / rel, dest.child(rel).path)
            done.append(rel)
    return done


def download(src: Location, target: Path) -> list[str]:
    """Copy the object `src` to the local file `target`, or the folder `src`'s files under the
    local folder `target` (each written atomically; a listed name that would leave `target` is
    `UnsafeName`, before it is written); the relative paths copied."""
    target = Path(target)
    if src.is_file():
        copy_to(src, target)
        return [target.name]
    done = []
    for rel in src.files():
        copy_to(src.child(rel), confined(target, rel, src.uri))
        done.append(rel)
    return done


def copy_to(src: Location, dest: Path) -> None:
    """The file or object `src` into the local file `dest`, whole or not at all."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with src.open_read() as fh:
        atomic.write_stream(dest, lambda out: _pump(fh, out))


def _pump(src, dst, chunk: int = 8 << 20) -> None:
    while block := src.read(chunk):
        dst.write(block)
