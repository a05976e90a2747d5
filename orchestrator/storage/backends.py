"""The file systems behind a `Location`: a local folder, S3 (boto3: typed answers, conditional
writes) and the other stores pyarrow opens (gs://, abfs://, hdfs://). Each gives the same few
operations on a path; each raises `FileNotFoundError` for what is not there (by type or status,
never by a message's words) and the typed errors of `storage.errors` for the rest.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from . import atomic, s3
from .errors import StoreUnreachable

CHUNK = 8 << 20
SINGLE_PUT_MAX = 4 << 30
"""Larger files are uploaded in parts (S3 takes at most 5 GiB in one PUT); either way an object
appears whole or not at all."""


class LocalBackend:
    """A local folder: writes through `storage.atomic` (temporary sibling, fsync, rename)."""

    def info(self, path: str) -> tuple[str, int]:
        p = Path(path)
        if p.is_file():
            return "file", p.stat().st_size
        return ("dir", 0) if p.is_dir() else ("none", 0)

    def list(self, path: str) -> list[str]:
        p = Path(path)
        return sorted(c.name for c in p.iterdir()) if p.is_dir() else []

    def files(self, path: str) -> list[str]:
        root, out = Path(path), []
        for folder, dirs, names in os.walk(root):  # links to folders are not followed
            dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(folder, d))]
            out += [Path(folder, n).relative_to(root).as_posix() for n in names if not os.path.islink(os.path.join(folder, n))]
        return sorted(out)

    @contextlib.contextmanager
    def open_read(self, path: str) -> Iterator[BinaryIO]:
        with open(path, "rb") as fh:
            yield fh

    def write(self, path: str, data: bytes) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        atomic.write_bytes(path, data)

    def put_file(self, source: Path, path: str) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(source, "rb") as src:
            atomic.write_stream(path, lambda fh: shutil.copyfileobj(src, fh, CHUNK))

    def delete_file(self, path: str) -> None:
        Path(path).unlink(missing_ok=True)

    def delete_tree(self, path: str) -> None:
        p = Path(path)
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink(missing_ok=True)


class S3Backend:
    """S3 through boto3 (`storage.s3`): one PUT per object, listings paginated, errors typed."""

    def __init__(self) -> None:
        self.client = s3.client()

    @staticmethod
    def _split(path: str) -> tuple[str, str]:
        bucket, _, key = path.partition("/")
        return bucket, key

    def _call(self, what: str, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as err:
            typed = s3.translate(err, what)
            if typed is err:
                raise
            raise typed from None

    def info(self, path: str) -> tuple[str, int]:
        bucket, key = self._split(path)
        if key:
            try:
                head = self._call(f"s3://{path}", self.client.head_object, Bucket=bucket, Key=key)
                return "file", int(head.get("ContentLength", 0))
            except FileNotFoundError:
                pass
        page = self._call(f"s3://{path}", self.client.list_objects_v2, Bucket=bucket, Prefix=f"{key}/" if key else "", MaxKeys=1)
        return ("dir", 0) if page.get("KeyCount", 0) or not key else ("none", 0)

    def _pages(self, path: str, **kw) -> Iterator[dict]:
        bucket, key = self._split(path)
        prefix = f"{key.rstrip('/')}/" if key else ""
        token: str | None = None
        while True:
            more = {"ContinuationToken": token} if token else {}
            page = self._call(f"s3://{path}", self.client.list_objects_v2, Bucket=bucket, Prefix=prefix, **kw, **more)
            yield {**page, "_prefix": prefix}
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return

    def list(self, path: str) -> list[str]:
        names: set[str] = set()
        for page in self._pages(path, Delimiter="/"):
            n = len(page["_prefix"])
            names |= {p["Prefix"][n:].rstrip("/") for p in page.get("CommonPrefixes", [])}
            names |= {o["Key"][n:] for o in page.get("Contents", []) if o["Key"][n:]}
        return sorted(names)

    def files(self, path: str) -> list[str]:
        out = []
        for page in self._pages(path):
            n = len(page["_prefix"])
            out += [o["Key"][n:] for o in page.get("Contents", []) if o["Key"][n:] and not o["Key"].endswith("/")]
        return sorted(out)

    @contextlib.contextmanager
    def open_read(self, path: str) -> Iterator[BinaryIO]:
        bucket, key = self._split(path)
        body = self._call(f"s3://{path}", self.client.get_object, Bucket=bucket, Key=key)["Body"]
        try:
            yield _Typed(body, f"s3://{path}")
        finally:
            body.close()

    def write(self, path: str, data: bytes) -> None:
        bucket, key = self._split(path)
        self._call(f"s3://{path}", self.client.put_object, Bucket=bucket, Key=key, Body=data)

    def put_file(self, source: Path, path: str) -> None:
        bucket, key = self._split(path)
        if source.stat().st_size > SINGLE_PUT_MAX:
            from boto3.s3.transfer import TransferConfig

            self._call(f"s3://{path}", self.client.upload_file, str(source), bucket, key, Config=TransferConfig(use_threads=False))
            return
        with open(source, "rb") as fh:
            self._call(f"s3://{path}", self.client.put_object, Bucket=bucket, Key=key, Body=fh)

    def delete_file(self, path: str) -> None:
        bucket, key = self._split(path)
        self._call(f"s3://{path}", self.client.delete_object, Bucket=bucket, Key=key)

    def delete_tree(self, path: str) -> None:
        bucket, key = self._split(path)
        keys = [f"{key}/{rel}" for rel in self.files(path)] if key else []
        if key and self.info(path)[0] == "file":
            keys.append(key)
        for i in range(0, len(keys), 1000):
            batch = {"Objects": [{"Key": k} for k in keys[i : i + 1000]], "Quiet": True}
            self._call(f"s3://{path}", self.client.delete_objects, Bucket=bucket, Delete=batch)


class _Typed:
    """A response body whose read errors are typed like the rest (a store that stops mid-file)."""

    def __init__(self, body, what: str):
        self.body, self.what = body, what

    def read(self, n: int = -1) -> bytes:
        try:
            return self.body.read(n) if n >= 0 else self.body.read()
        except Exception as err:  # only the network can fail here: a store that stops mid-file
            typed = s3.translate(err, self.what)
            raise (typed if typed is not err else StoreUnreachable(f"{self.what}: the transfer stopped ({type(err).__name__})")) from None


class ArrowBackend:
    """The other stores, through `pyarrow.fs` (gs://, abfs://, hdfs://): missing paths are found
    by `get_file_info`'s type before a read, so no message is read to tell them."""

    def __init__(self, uri: str):
        from pyarrow import fs

        self.fs = fs.FileSystem.from_uri(uri)[0]

    def info(self, path: str) -> tuple[str, int]:
        from pyarrow import fs

        i = self.fs.get_file_info(path)
        kind = {fs.FileType.File: "file", fs.FileType.Directory: "dir"}.get(i.type, "none")
        return kind, int(i.size or 0)

    def _selected(self, path: str, recursive: bool):
        from pyarrow import fs

        return self.fs.get_file_info(fs.FileSelector(path, allow_not_found=True, recursive=recursive))

    def list(self, path: str) -> list[str]:
        return sorted(PurePosixPath(i.path).name for i in self._selected(path, False))

    def files(self, path: str) -> list[str]:
        from pyarrow import fs

        root = path.rstrip("/") + "/"
        return sorted(i.path[len(root) :] for i in self._selected(path, True) if i.type == fs.FileType.File)

    @contextlib.contextmanager
    def open_read(self, path: str) -> Iterator[BinaryIO]:
        if self.info(path)[0] != "file":
            raise FileNotFoundError(errno.ENOENT, "not found", path)
        with self.fs.open_input_stream(path) as fh:
            yield fh

    def write(self, path: str, data: bytes) -> None:
        with self.fs.open_output_stream(path) as fh:
            fh.write(data)

    def put_file(self, source: Path, path: str) -> None:
        with open(source, "rb") as src, self.fs.open_output_stream(path) as fh:
            shutil.copyfileobj(src, fh, CHUNK)

    def delete_file(self, path: str) -> None:
        if self.info(path)[0] == "file":
            self.fs.delete_file(path)

    def delete_tree(self, path: str) -> None:
        kind = self.info(path)[0]
        if kind == "dir":
            self.fs.delete_dir(path)
        elif kind == "file":
            self.fs.delete_file(path)


Backend = LocalBackend | S3Backend | ArrowBackend
_BY_SCHEME: dict[str, Callable[[str], Backend]] = {"file": lambda uri: LocalBackend(), "s3": lambda uri: S3Backend()}


def backend_for(scheme: str, uri: str) -> Backend:
    """The file system of a location of `scheme` (`file` for a local one): the local disk, S3
    through boto3, and every other store through pyarrow."""
    return _BY_SCHEME.get(scheme, ArrowBackend)(uri)
