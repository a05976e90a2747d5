"""A folder published whole and fetched verified, on any `Location`: the one protocol of the
trial checkpoints, the data cache (`data.mirror`) and the report's files (`storage.owned`).

Publish: the folder's files first (optionally under a fresh BUILD folder, so two publishers never
write the same objects), then ONE manifest, LAST, in one write:

    {"version": 1, "files": {"REL": {"size": N, "sha256": "HEX"}, ...}, "build": "BUILD"?, ...extra}

A reader trusts a folder only through its manifest: no manifest, no folder. Fetch reads the
manifest, refuses it whole when any name in it is not a plain relative name (`storage.names`:
no `..`, absolute path or link; `Damaged`, before a byte is written), then streams each file
into a staging folder, hashing as it goes, stops at the first size or sha256 that differs
(`Damaged`), and renames the staging folder into place only when every file matched
(`storage.atomic.publish_folder`). A manifest is the only thing a reader believes, and what it
names stays inside the folder.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import atomic
from .errors import Damaged, UnsafeName
from .location import Location
from .names import confined, unsafe_reason

VERSION = 1
MAX_MANIFEST_BYTES = 16 << 20
CHUNK = 8 << 20
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Entry:
    """One file of a manifest."""

    size: int
    sha256: str


@dataclass
class Manifest:
    """The files of a folder, their sizes and hashes; `build`: the subfolder they are under."""

    files: dict[str, Entry]
    build: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {**self.extra, "version": VERSION}
        if self.build:
            out["build"] = self.build
        out["files"] = {rel: {"size": e.size, "sha256": e.sha256} for rel, e in sorted(self.files.items())}
        return out

    @classmethod
    def from_dict(cls, data: object, where: str = "") -> Manifest:
        """The manifest in `data`; `Damaged` naming `where` and what is wrong."""
        problem = _problem(data)
        if problem:
            raise Damaged(f"{where}: {problem}")
        assert isinstance(data, dict)
        files = {rel: Entry(int(e["size"]), str(e["sha256"])) for rel, e in data["files"].items()}
        extra = {k: v for k, v in data.items() if k not in ("version", "build", "files")}
        return cls(files, data.get("build"), extra)

    def root(self, folder: Location) -> Location:
        """Where the files are: `folder`, or its BUILD subfolder."""
        return folder.child(self.build) if self.build else folder


def _problem(m: object) -> str:
    if not isinstance(m, dict) or m.get("version") != VERSION:
        return f"not a version-{VERSION} manifest"
    build = m.get("build")
    if build is not None and (unsafe_reason(build) or "/" in build):
        return f"an unsafe build folder {str(build)[:60]!r}"
    files = m.get("files")
    if not isinstance(files, dict):
        return "no file list"
    for rel, want in files.items():
        why = unsafe_reason(rel)
        if why:
            return f"unsafe file name {str(rel)[:60]!r} ({why})"
        if not isinstance(want, dict) or type(want.get("size")) is not int or want["size"] < 0:
            return f"no size for {rel}"
        if not isinstance(want.get("sha256"), str) or not _SHA256.fullmatch(want["sha256"]):
            return f"no sha256 for {rel}"
    return ""


def hash_file(path: Path) -> Entry:
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as fh:
        while block := fh.read(CHUNK):
            h.update(block)
            size += len(block)
    return Entry(size, h.hexdigest())


def manifest_of(folder: Path, *, skip: tuple[str, ...] = ()) -> dict[str, Entry]:
    """Every file under the local `folder` (a file itself: just it) with its size and sha256;
    `UnsafeName` for a link or a name a manifest cannot hold."""
    folder = Path(folder)
    if folder.is_file():
        return {folder.name: hash_file(folder)}
    out = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_symlink():
            raise UnsafeName(f"{folder}: {rel} is a link; a published folder holds files only")
        if path.is_file() and rel not in skip:
            out[confined(folder, rel).relative_to(folder).as_posix()] = hash_file(path)
    return out


def mismatch(folder: Path, files: dict[str, Entry]) -> str:
    """'' when the local `folder` holds the files of `files` as they are listed; else what differs."""
    for rel, want in sorted(files.items()):
        path = confined(folder, rel)
        if not path.is_file():
            return f"{rel} is missing"
        have = hash_file(path)
        if have.size != want.size:
            return f"{rel}: {have.size:,} bytes, the manifest says {want.size:,}"
        if have.sha256 != want.sha256:
            return f"{rel}: sha256 differs from the manifest"
    return ""


# ---- on any Location ------------------------------------------------------------------------------
def read_manifest(folder: Location, name: str) -> Manifest:
    """The manifest `name` of `folder`: `FileNotFoundError` when there is none, `Damaged` when it
    is not one (not JSON, too large, an unsafe name...)."""
    where = folder.child(name)
    try:
        data = json.loads(where.read_bytes(limit=MAX_MANIFEST_BYTES))
    except (ValueError, UnicodeDecodeError) as err:  # too large or not JSON
        raise Damaged(f"{where}: {' '.join(str(err).split())[:120]}") from None
    return Manifest.from_dict(data, str(where))


def put_manifest(folder: Location, name: str, manifest: Manifest) -> None:
    folder.child(name).write_json(manifest.to_dict(), indent=1)


def upload(source: Path, root: Location, files: dict[str, Entry]) -> None:
    """The listed files of the local `source` (a folder, or one file) under `root`."""
    source = Path(source)
    for rel in sorted(files):
        root.child(rel).upload(source if source.is_file() else confined(source, rel))


def publish(
    source: Path, dest: Location, *, name: str, build: str | None = None, extra: dict | None = None, skip: tuple[str, ...] = ()
) -> Manifest:
    """Publish the local folder (or file) `source` at `dest`: files (under `dest/BUILD` with
    `build`), then the manifest `name`, last. Store errors propagate (the caller retries)."""
    manifest = Manifest(manifest_of(source, skip=(*skip, name)), build, dict(extra or {}))
    upload(source, manifest.root(dest), manifest.files)
    put_manifest(dest, name, manifest)
    return manifest


def new_build_id() -> str:
    import time

    return f"b{time.time_ns():x}-{secrets.token_hex(4)}"


def download_verified(source: Location, dest: Path, want: Entry) -> None:
    """Stream `source` into the local `dest`, hashing as it goes (`copy_verified`)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest, "wb") as out:
        copy_verified(source, out, want)


def copy_verified(source: Location, out, want: Entry) -> None:
    """Stream `source` into the binary file object `out`, hashing as it goes; `Damaged` at the
    first byte beyond the listed size, when the size or sha256 differs, or when `source` is missing."""
    h, size = hashlib.sha256(), 0
    try:
        with source.open_read() as src:
            while block := src.read(CHUNK):
                size += len(block)
                if size > want.size:
                    raise Damaged(f"{source} is larger than its manifest's {want.size:,} bytes")
                h.update(block)
                out.write(block)
    except FileNotFoundError:
        raise Damaged(f"{source} is missing") from None
    if size != want.size:
        raise Damaged(f"{source} has {size:,} bytes, its manifest says {want.size:,}")
    if h.hexdigest() != want.sha256:
        raise Damaged(f"{source}: sha256 {h.hexdigest()[:12]}…, its manifest says {want.sha256[:12]}…")


def fetch(folder: Location, dest: Path, *, name: str, manifest: Manifest | None = None) -> Manifest:
    """Download the folder published at `folder` into the local `dest`, verified file by file and
    renamed in whole (the module's docstring). `FileNotFoundError`: no manifest; `Damaged`: not
    whole; store errors propagate. When `dest` appeared meanwhile (another process), it is kept."""
    m = manifest or read_manifest(folder, name)
    root = m.root(folder)

    def build(tmp: Path) -> None:
        for rel, want in sorted(m.files.items()):
            download_verified(root.child(rel), confined(tmp, rel, str(folder)), want)

    atomic.publish_folder(dest, build)
    return m


def fetch_file(folder: Location, dest: Path, *, name: str, manifest: Manifest | None = None) -> Manifest:
    """`fetch` of an entry that is one file, named like `dest`: downloaded beside it, verified,
    renamed onto it."""
    m = manifest or read_manifest(folder, name)
    if list(m.files) != [dest.name]:
        raise Damaged(f"{folder}: it should hold {dest.name} only")
    dest.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_stream(dest, lambda fh: copy_verified(m.root(folder).child(dest.name), fh, m.files[dest.name]))
    return m
