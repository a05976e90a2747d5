"""Prepared cache folders mirrored on object storage (GATESWEEP_CACHE=s3://bucket/prefix).

Each node builds or downloads a prepared folder into its local scratch cache (memory maps need
local files); the object store holds one published copy per key, so a fresh node downloads what
another node built instead of tokenizing again.

Layout of one published entry `KIND/KEY/` on the store:

    KIND/KEY/BUILD/...          the folder's files, uploaded first (BUILD: a fresh id per publisher)
    KIND/KEY/MANIFEST.json      written LAST, in one PUT: the build id, every file's size and sha256
    KIND/KEY/LEASE.json         while a node builds the entry: who, and a heartbeat

- **Trust**: an entry without a MANIFEST.json that parses is not there. A download streams each
  file (8 MiB at a time) into a local staging folder, hashing as it goes, and stops at the first
  file whose size or sha256 differs from the manifest; the staging folder is then removed and
  the entry is built again (and published over the damaged one). Only a whole, verified folder
  is renamed into the local cache (`storage.publish_folder`).
- **Concurrency**: two publishers never write the same objects (each its own BUILD folder), and
  a manifest is one PUT, so whichever manifest is read names a whole folder. A publisher that
  finds a manifest already there when its upload ends keeps that one and deletes its own folder;
  after writing its manifest it reads it back and, if another publisher's PUT came later, deletes
  its own folder too: one wins whole. Before building, a node takes the entry's lease
  (`lease`): another node asking for the same key waits for the manifest instead of tokenizing
  again, and takes the lease over when its heartbeat stops (a builder killed outright); the
  staleness is judged by the waiter's own clock, so clock skew between nodes does not matter.
- **Errors**: an unreachable store, refused or missing credentials and a missing bucket are
  `StoreUnavailable` (a `DataUnavailable`) naming the URI and the reason; credentials are never
  part of a message.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .. import storage
from ..storage.atomic import TMP_SUFFIX
from ..storage.location import Location
from .sources import DataUnavailable

MARKER = "MANIFEST.json"
LEASE = "LEASE.json"
MANIFEST_VERSION = 1
MAX_MANIFEST_BYTES = 1 << 20
CHUNK = 8 << 20
LEASE_ENV = "GATESWEEP_CACHE_LEASE_S"
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")


class StoreUnavailable(DataUnavailable):
    """The object store behind GATESWEEP_CACHE cannot be used (unreachable, credentials, bucket)."""


class DamagedUpload(DataUnavailable):
    """A published entry whose files do not match its manifest."""


def _say(message: str) -> None:
    print(f"gatesweep: {message}", file=sys.stderr)


def redact(text: str) -> str:
    """`text` with any credential of the environment replaced by ***."""
    for name in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID"):
        value = os.environ.get(name)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text


def reason(err: BaseException) -> str:
    """One line of an object-store error: its first line, shortened, without credentials."""
    text = " ".join(str(err).split()) or type(err).__name__
    text = text.replace("When getting information for key", "getting").replace("AWS Error ", "")
    return redact(text[:300])


def check(root: Location) -> None:
    """Can the store at `root` be used: the runs folder's read-only check
    (`storage.remote.store_problem`: credentials, an endpoint that answers, the bucket), then an
    object written, read back and deleted; StoreUnavailable naming the URI and the reason otherwise."""
    from ..storage.remote import store_problem

    problem = store_problem(root)
    if problem:
        raise StoreUnavailable(f"GATESWEEP_CACHE={root.uri}: {problem}")
    probe = root.child(f".probe-{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}")
    try:
        probe.write_bytes(b"gatesweep")
        if probe.read_bytes(limit=64) != b"gatesweep":
            raise OSError("an object written could not be read back")
        probe.delete()
    except (OSError, ValueError) as err:
        raise StoreUnavailable(f"GATESWEEP_CACHE={root.uri}: the object store refuses a write or read ({reason(err)})") from None


def _store_error(where: Location, what: str, err: BaseException) -> StoreUnavailable:
    return StoreUnavailable(f"{where.uri}: {what} failed ({reason(err)})")


def _hash_file(path: Path) -> tuple[int, str]:
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as fh:
        while block := fh.read(CHUNK):
            h.update(block)
            size += len(block)
    return size, h.hexdigest()


def _safe_rel(rel: object) -> bool:
    return isinstance(rel, str) and all(_SAFE_NAME.match(part) for part in rel.split("/"))


def read_manifest(remote: Location, *, quiet: bool = False) -> dict | None:
    """The entry's manifest if it is there and well formed, else None (a damaged one is said)."""
    marker = remote.child(MARKER)
    try:
        manifest = json.loads(marker.read_bytes(limit=MAX_MANIFEST_BYTES))
    except FileNotFoundError:
        return None
    except OSError as err:
        if "not found" in str(err).lower() or "nosuchkey" in str(err).lower():
            return None
        raise _store_error(marker, "reading", err) from None
    except ValueError as err:
        if not quiet:
            _say(f"{marker.uri} is damaged ({str(err)[:120]}); building the entry again")
        return None
    problem = _manifest_problem(manifest)
    if problem:
        if not quiet:
            _say(f"{marker.uri} is damaged ({problem}); building the entry again")
        return None
    return manifest


def _manifest_problem(m: object) -> str | None:
    if not isinstance(m, dict) or m.get("version") != MANIFEST_VERSION:
        return f"not a version-{MANIFEST_VERSION} manifest"
    if not _safe_rel(m.get("build")) or "/" in m["build"]:
        return "no valid build id"
    files = m.get("files")
    if not isinstance(files, dict) or not files:
        return "no file list"
    for rel, want in files.items():
        if not _safe_rel(rel):
            return f"unsafe file name {str(rel)[:60]!r}"
        if not isinstance(want, dict) or not isinstance(want.get("size"), int) or want["size"] < 0:
            return f"no size for {rel}"
        if not isinstance(want.get("sha256"), str) or not re.fullmatch(r"[0-9a-f]{64}", want["sha256"]):
            return f"no sha256 for {rel}"
    return None


def _download_verified(source: Location, dest: Path, want: dict) -> None:
    """Stream `source` into `dest`, hashing as it goes; DamagedUpload on a size or hash mismatch."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    h, size = hashlib.sha256(), 0
    try:
        with source.fs.open_input_stream(source.path) as src, open(dest, "wb") as out:
            while block := src.read(CHUNK):
                size += len(block)
                if size > want["size"]:
                    raise DamagedUpload(f"{source.uri} is larger than its manifest's {want['size']:,} bytes")
                h.update(block)
                out.write(block)
    except FileNotFoundError:
        raise DamagedUpload(f"{source.uri} is missing") from None
    except OSError as err:
        if "not found" in str(err).lower() or "nosuchkey" in str(err).lower():
            raise DamagedUpload(f"{source.uri} is missing") from None
        raise _store_error(source, "downloading", err) from None
    if size != want["size"]:
        raise DamagedUpload(f"{source.uri} has {size:,} bytes, its manifest says {want['size']:,}")
    if h.hexdigest() != want["sha256"]:
        raise DamagedUpload(f"{source.uri}: sha256 {h.hexdigest()[:12]}…, its manifest says {want['sha256'][:12]}…")


def fetch(remote: Location, dest: Path) -> bool:
    """Download the entry published at `remote` into the local folder `dest` (verified file by
    file, renamed in whole). False when there is no whole entry there (absent, or damaged: said
    on stderr); StoreUnavailable when the store cannot be used."""
    manifest = read_manifest(remote)
    if manifest is None:
        return False
    build = remote.child(manifest["build"])

    def download(tmp: Path) -> None:
        for rel, want in sorted(manifest["files"].items()):
            _download_verified(build.child(rel), tmp / rel, want)

    try:
        storage.publish_folder(dest, download)
    except DamagedUpload as err:
        _say(f"the published entry {remote.uri} is damaged ({err}); building it again")
        _withdraw(remote, manifest["build"])
        return False
    return True


def withdraw(remote: Location) -> None:
    """Take down the entry published at `remote` (found unusable after a verified download)."""
    manifest = read_manifest(remote, quiet=True)
    if manifest is not None:
        _withdraw(remote, manifest["build"])


def _withdraw(remote: Location, build: str) -> None:
    """Take down a published entry found damaged (its manifest, if it still names `build`, then
    the build's files), so that the rebuilt one can be published in its place."""
    try:
        current = read_manifest(remote, quiet=True)
        if current is not None and current.get("build") == build:
            remote.child(MARKER).delete()
        remote.child(build).delete_tree()
    except OSError as err:
        _say(f"could not take down the damaged entry {remote.uri} ({reason(err)})")


def fetch_file(remote: Location, dest: Path) -> bool:
    """`fetch` for an entry that is one file (a tokenizer): downloaded beside `dest`, verified,
    renamed onto it."""
    manifest = read_manifest(remote)
    if manifest is None:
        return False
    if list(manifest["files"]) != [dest.name]:
        _say(f"the published entry {remote.uri} is damaged (it should hold {dest.name} only); building it again")
        return False
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.{secrets.token_hex(4)}{TMP_SUFFIX}")
    try:
        _download_verified(remote.child(manifest["build"], dest.name), tmp, manifest["files"][dest.name])
        os.replace(tmp, dest)
    except DamagedUpload as err:
        _say(f"the published entry {remote.uri} is damaged ({err}); building it again")
        _withdraw(remote, manifest["build"])
        return False
    finally:
        tmp.unlink(missing_ok=True)
    return True


def publish(source: Path, remote: Location) -> bool:
    """Upload the local folder (or single file) `source` as the entry at `remote`: its files into a fresh build
    folder, then the manifest, last. True when this call's folder is the one published; False
    when another publisher's whole entry was there first (this call's upload is deleted)."""
    paths = (
        [(source.name, source)]
        if source.is_file()
        else [(f.relative_to(source).as_posix(), f) for f in sorted(source.rglob("*")) if f.is_file()]
    )
    files = {}
    for rel, f in paths:
        size, digest = _hash_file(f)
        files[rel] = {"size": size, "sha256": digest}
    build_id = f"b{time.time_ns():x}-{secrets.token_hex(4)}"
    mine = remote.child(build_id)
    try:
        for rel, f in paths:
            mine.child(rel).upload(f)
        existing = read_manifest(remote, quiet=True)
        if existing is not None and _whole(remote, existing):
            mine.delete_tree()
            return False
        remote.child(MARKER).write_json(
            {
                "version": MANIFEST_VERSION,
                "build": build_id,
                "files": files,
                "published_at": time.time(),
                "by": {"host": socket.gethostname(), "pid": os.getpid()},
            },
            indent=1,
        )
        settled = read_manifest(remote, quiet=True)
    except OSError as err:
        raise _store_error(remote, "uploading", err) from None
    if settled is not None and settled.get("build") != build_id:
        mine.delete_tree()  # a later manifest names another publisher's whole folder
        return False
    return True


def _whole(remote: Location, manifest: dict) -> bool:
    """Every file the manifest names is there with its size (hashes are checked on download)."""
    build = remote.child(manifest["build"])
    try:
        return all(build.child(rel).size() == want["size"] and build.child(rel).is_file() for rel, want in manifest["files"].items())
    except OSError:
        return False


def published(kind_root: Location) -> list[str]:
    """The keys under `kind_root` (e.g. GATESWEEP_CACHE/tokens) that have a manifest (one listing)."""
    try:
        return sorted({rel.split("/")[0] for rel in kind_root.files() if rel.count("/") == 1 and rel.endswith("/" + MARKER)})
    except OSError as err:
        raise _store_error(kind_root, "listing", err) from None


def lease_seconds() -> float:
    return float(os.environ.get(LEASE_ENV, "60"))


@contextmanager
def lease(remote: Location, say: Callable[[str], None] | None = None) -> Iterator[bool]:
    """Hold the right to build the entry at `remote` across nodes. Yields True while this process
    holds it (a heartbeat thread refreshes it every ttl/4), or False as soon as a manifest appears
    while waiting for another node's build (the caller then downloads it)."""
    say = say or _say
    ttl = lease_seconds()
    obj = remote.child(LEASE)
    me = {"owner": secrets.token_hex(8), "host": socket.gethostname(), "pid": os.getpid()}
    seen: tuple[str, float] | None = None  # (lease content, when this process first saw it)
    told = False
    while True:
        current = _read_lease(obj)
        if current is not None and (seen is None or seen[0] != current):
            seen = (current, time.monotonic())
        stale = current is not None and seen is not None and time.monotonic() - seen[1] > ttl
        if current is None or stale:
            if stale:
                say(f"the lease on {remote.uri} has not been renewed for {ttl:.0f} s; taking it over")
            if _take(obj, me):
                break
            continue
        if read_manifest(remote, quiet=True) is not None:
            yield False
            return
        if not told:
            holder = _describe(current)
            say(f"waiting for {holder} preparing {remote.uri}")
            told = True
        time.sleep(min(1.0, ttl / 4))
    stop = threading.Event()

    def beat() -> None:
        n = 0
        while not stop.wait(ttl / 4):
            n += 1
            try:
                obj.write_json({**me, "beat": n})
            except OSError:
                pass  # the store is down for a moment: the next beat tries again

    thread = threading.Thread(target=beat, name="gatesweep-lease", daemon=True)
    thread.start()
    try:
        yield True
    finally:
        stop.set()
        thread.join()
        try:
            if _owner(obj) == me["owner"]:
                obj.delete()
        except OSError:
            pass


def _read_lease(obj: Location) -> str | None:
    """The lease's text, or None when there is none (also when its holder deletes it meanwhile)."""
    try:
        return obj.read_bytes(limit=4096).decode("utf-8", "replace")
    except FileNotFoundError:
        return None
    except ValueError:  # larger than any lease gatesweep writes: not one of ours, but held
        return "{}"
    except OSError as err:
        if "not found" in str(err).lower() or "nosuchkey" in str(err).lower():
            return None
        raise _store_error(obj, "reading the lease", err) from None


def _take(obj: Location, me: dict) -> bool:
    """Write our lease, wait a moment and read it back: ours only if no later PUT replaced it."""
    try:
        obj.write_json({**me, "beat": 0})
        time.sleep(0.3)
        return _owner(obj) == me["owner"]
    except OSError as err:
        raise _store_error(obj, "writing the lease", err) from None


def _owner(obj: Location) -> str | None:
    try:
        return json.loads(obj.read_bytes(limit=4096)).get("owner")
    except FileNotFoundError:
        return None
    except (ValueError, AttributeError):
        return None
    except OSError as err:
        if "not found" in str(err).lower():
            return None
        raise


def _describe(text: str) -> str:
    try:
        d = json.loads(text)
        return f"pid {int(d['pid'])} on {str(d['host'])[:64]}"
    except (ValueError, KeyError, TypeError):
        return "another node"
