"""A folder that is a local path or an object-store URI, behind one small interface.

`Location.parse("runs")`, `Location.parse("/shared/runs")`, `Location.parse("s3://bucket/prefix")`
(and the other URIs `pyarrow.fs` understands: gs://, abfs://, hdfs://) give the same operations:
`child`, `exists`, `read_bytes` / `write_bytes` (and the text and JSON forms), `list`, `delete_tree`,
`upload` / `download` of a local file or folder.

Whole or absent, on both kinds:
- a local write goes through `orchestrator.storage.atomic` (temporary sibling, fsync, rename);
- an object-store write is one PUT (or one multipart upload, visible only once it completes), so
  a reader sees the old object or the new one, never half of one. A *folder* uploaded file by
  file is not atomic: whoever needs a whole folder writes a marker object last and trusts only
  folders that have it (the trial checkpoints' COMPLETE).

S3 is reached the way boto3, MLflow and pyarrow reach it: credentials from the standard chain
(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, a profile, an instance role), the endpoint from
AWS_ENDPOINT_URL (or AWS_ENDPOINT_URL_S3), the region from AWS_DEFAULT_REGION / AWS_REGION.
Nothing here prints or stores a credential; `str(location)` is the URI as the user wrote it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from . import atomic

REMOTE_SCHEMES = ("s3", "gs", "gcs", "abfs", "abfss", "hdfs", "viewfs")


def is_remote(where: str | Path) -> bool:
    """Whether `where` names an object store (a URI with a scheme other than file://)."""
    s = str(where)
    return "://" in s and s.split("://", 1)[0].lower() in REMOTE_SCHEMES


def _s3_filesystem():
    from pyarrow import fs

    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    kwargs: dict[str, Any] = {}
    if endpoint:
        scheme, _, host = endpoint.partition("://")
        kwargs["endpoint_override"] = host.rstrip("/") if host else endpoint
        kwargs["scheme"] = scheme if host else "https"
    region = os.environ.get("AWS_DEFAULT_REGION") or os.environ.get("AWS_REGION")
    if region or endpoint:
        kwargs["region"] = region or "us-east-1"
    from .remote import withheld_credentials

    held = withheld_credentials()  # the keys this process keeps out of Ray's runtime_env, if any
    if held.get("AWS_ACCESS_KEY_ID") and held.get("AWS_SECRET_ACCESS_KEY"):
        kwargs["access_key"], kwargs["secret_key"] = held["AWS_ACCESS_KEY_ID"], held["AWS_SECRET_ACCESS_KEY"]
        token = held.get("AWS_SESSION_TOKEN") or held.get("AWS_SECURITY_TOKEN")
        if token:
            kwargs["session_token"] = token
    kwargs["connect_timeout"] = float(os.environ.get("GATESWEEP_S3_CONNECT_TIMEOUT", "5"))
    kwargs["request_timeout"] = float(os.environ.get("GATESWEEP_S3_REQUEST_TIMEOUT", "60"))
    return fs.S3FileSystem(**kwargs)


@dataclass(frozen=True)
class Location:
    uri: str
    """As the user wrote it (a local path is made absolute); what messages show."""
    path: str
    """The path inside the file system (`bucket/prefix/...` on S3, an absolute path locally)."""

    @classmethod
    def parse(cls, where: str | Path) -> Location:
        s = str(where)
        if s.startswith("file://"):
            s = s[len("file://") :]
        if not is_remote(s):
            p = str(Path(s).expanduser().resolve())
            return cls(p, p)
        scheme, rest = s.split("://", 1)
        rest = rest.strip("/")
        return cls(f"{scheme.lower()}://{rest}", rest)

    # ---- naming -------------------------------------------------------------------------------
    @property
    def remote(self) -> bool:
        return is_remote(self.uri)

    @property
    def local(self) -> Path | None:
        """The local folder, or None on an object store."""
        return None if self.remote else Path(self.path)

    @property
    def name(self) -> str:
        return PurePosixPath(self.path).name

    def child(self, *parts: str) -> Location:
        parts = tuple(p.strip("/") for p in parts if p)
        if not self.remote:
            p = str(Path(self.path, *parts))
            return Location(p, p)
        sub = "/".join(parts)
        return Location(f"{self.uri}/{sub}", f"{self.path}/{sub}")

    def __truediv__(self, part: str) -> Location:
        return self.child(part)

    def __str__(self) -> str:
        return self.uri

    # ---- the file system ------------------------------------------------------------------------
    @property
    def fs(self):
        from pyarrow import fs

        if not self.remote:
            return fs.LocalFileSystem()
        scheme = self.uri.split("://", 1)[0]
        if scheme == "s3":
            return _s3_filesystem()
        return fs.FileSystem.from_uri(self.uri)[0]

    def _info(self):
        return self.fs.get_file_info(self.path)

    def exists(self) -> bool:
        from pyarrow import fs

        return self._info().type != fs.FileType.NotFound

    def is_file(self) -> bool:
        from pyarrow import fs

        return self._info().type == fs.FileType.File

    def size(self) -> int:
        return int(self._info().size or 0)

    def list(self) -> list[str]:
        """The names directly under this folder (empty when it does not exist)."""
        from pyarrow import fs

        sel = fs.FileSelector(self.path, allow_not_found=True, recursive=False)
        return sorted(PurePosixPath(i.path).name for i in self.fs.get_file_info(sel))

    def files(self) -> list[str]:
        """Every file under this folder, as paths relative to it (sorted)."""
        from pyarrow import fs

        sel = fs.FileSelector(self.path, allow_not_found=True, recursive=True)
        root = self.path.rstrip("/") + "/"
        return sorted(i.path[len(root) :] for i in self.fs.get_file_info(sel) if i.type == fs.FileType.File)

    # ---- reading and writing ----------------------------------------------------------------------
    def read_bytes(self, limit: int | None = None) -> bytes:
        """The whole object or file (ValueError when it is larger than `limit` bytes)."""
        if self.local is not None:
            p = self.local
            if limit is not None and p.stat().st_size > limit:
                raise ValueError(f"{self.uri}: {p.stat().st_size:,} bytes, more than {limit:,}")
            return p.read_bytes()
        if limit is not None and self.size() > limit:
            raise ValueError(f"{self.uri}: {self.size():,} bytes, more than {limit:,}")
        with self.fs.open_input_stream(self.path) as fh:
            return fh.read()

    def read_text(self, limit: int | None = None) -> str:
        return self.read_bytes(limit).decode("utf-8")

    def read_json(self, limit: int | None = None) -> Any:
        return json.loads(self.read_text(limit))

    def write_bytes(self, data: bytes) -> None:
        if self.local is not None:
            self.local.parent.mkdir(parents=True, exist_ok=True)
            atomic.write_bytes(self.local, data)
            return
        with self.fs.open_output_stream(self.path) as fh:
            fh.write(data)

    def write_text(self, text: str) -> None:
        self.write_bytes(text.encode("utf-8"))

    def write_json(self, obj: Any, **kwargs: Any) -> None:
        self.write_text(json.dumps(obj, **kwargs) + "\n")

    def delete(self) -> None:
        """Remove this file or object (nothing when it is absent)."""
        if self.exists():
            self.fs.delete_file(self.path)

    def delete_tree(self) -> None:
        """Remove this folder and everything under it (nothing when it is absent)."""
        from pyarrow import fs

        info = self._info()
        if info.type == fs.FileType.Directory:
            self.fs.delete_dir(self.path)
        elif info.type == fs.FileType.File:
            self.fs.delete_file(self.path)
        elif self.remote:  # a prefix with objects under it but no directory marker
            for rel in self.files():
                self.fs.delete_file(f"{self.path}/{rel}")

    # ---- copying between here and a local folder ------------------------------------------------
    def upload(self, source: Path, *, skip: tuple[str, ...] = ()) -> list[str]:
        """Copy a local file to this object, or a local folder's files under this folder (the
        relative paths copied, sorted; names in `skip` are left out, to be written last)."""
        source = Path(source)
        if source.is_file():
            self._copy_in(source, self)
            return [source.name]
        done = []
        for f in sorted(p for p in source.rglob("*") if p.is_file()):
            rel = f.relative_to(source).as_posix()
            if rel in skip:
                continue
            self._copy_in(f, self.child(rel))
            done.append(rel)
        return done

    def download(self, target: Path) -> list[str]:
        """Copy this object to the local file `target`, or this folder's files under the local
        folder `target` (each file written atomically); the relative paths copied."""
        target = Path(target)
        if self.is_file():
            self._copy_out(self, target)
            return [target.name]
        done = []
        for rel in self.files():
            self._copy_out(self.child(rel), target / rel)
            done.append(rel)
        return done

    @staticmethod
    def _copy_in(source: Path, dest: Location) -> None:
        if dest.local is not None:
            dest.local.parent.mkdir(parents=True, exist_ok=True)
            with open(source, "rb") as src:
                atomic.write_stream(dest.local, lambda fh: _pump(src, fh))
            return
        with open(source, "rb") as src, dest.fs.open_output_stream(dest.path) as fh:
            _pump(src, fh)

    @staticmethod
    def _copy_out(source: Location, dest: Path) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        with source.fs.open_input_stream(source.path) as src:
            atomic.write_stream(dest, lambda fh: _pump(src, fh))


def _pump(src, dst, chunk: int = 8 << 20) -> None:
    while True:
        b = src.read(chunk)
        if not b:
            return
        dst.write(b)
