"""Prepared cache folders mirrored on object storage (GATESWEEP_CACHE=s3://bucket/prefix).

Each node builds or downloads a prepared folder into its local scratch cache (memory maps need
local files); the object store holds one published copy per key, so a fresh node downloads what
another node built instead of tokenizing again. The protocol is the storage room's one
(`storage.folders`, `storage.lease`); what this module adds is the cache's layout and its race:

    KIND/KEY/BUILD/...          the folder's files, uploaded first (BUILD: a fresh id per publisher)
    KIND/KEY/MANIFEST.json      written LAST, in one write: the build id, every file's size and sha256
    KIND/KEY/LEASE.json         while a node builds the entry: the lease, with its heartbeat

- **Trust**: an entry without a MANIFEST.json that parses, or whose manifest names anything but
  plain relative names, is not there. A download is verified file by file (`storage.folders.fetch`)
  and renamed in whole; a damaged entry is withdrawn and built again (and published over it).
- **Concurrency**: two publishers never write the same objects (each its own BUILD folder), and
  a manifest is one write, so whichever manifest is read names a whole folder. A publisher that
  finds a whole entry already there when its upload ends keeps that one and deletes its own
  folder; after writing its manifest it reads it back and, if another publisher's write came
  later, deletes its own folder too: one wins whole. Before building, a node takes the entry's
  lease (`storage.lease`: a conditional create on S3, judged on the store's clock): another node
  asking for the same key waits for the manifest instead of tokenizing again, and takes the
  lease over once its heartbeat stops (a builder killed outright).
- **Errors**: an unreachable store, refused or missing credentials, an endpoint that does not
  answer as S3 and a missing bucket are `StoreUnavailable` (a `DataUnavailable`) naming the URI
  and the reason; credentials are never part of a message.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..storage import Damaged, Location, UnsafeName, folders
from ..storage.lease import lease_for
from ..storage.usable import write_problem
from .sources import DataUnavailable

MARKER = "MANIFEST.json"
LEASE = "LEASE.json"
LEASE_ENV = "GATESWEEP_CACHE_LEASE_S"


class StoreUnavailable(DataUnavailable):
    """The object store behind GATESWEEP_CACHE cannot be used (unreachable, credentials, bucket)."""


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
    """One line of a store's error, shortened, without credentials."""
    return redact((" ".join(str(err).split()) or type(err).__name__)[:300])


def check(root: Location) -> None:
    """Can the store at `root` be used (`storage.usable.write_problem`: credentials, an endpoint
    that answers as the store, the bucket, an object written, read back and deleted);
    StoreUnavailable naming the URI and the reason otherwise."""
    problem = write_problem(root)
    if problem:
        raise StoreUnavailable(f"GATESWEEP_CACHE={root.uri}: {problem}")


def _store_error(where: Location, what: str, err: BaseException) -> StoreUnavailable:
    return StoreUnavailable(f"{where.uri}: {what} failed ({reason(err)})")


def read_manifest(remote: Location, *, quiet: bool = False) -> folders.Manifest | None:
    """The entry's manifest if it is there and well formed, else None (a damaged one is said)."""
    try:
        return folders.read_manifest(remote, MARKER)
    except FileNotFoundError:
        return None
    except Damaged as err:
        if not quiet:
            _say(f"{remote.child(MARKER)} is damaged ({str(err).split(': ', 1)[-1][:160]}); building the entry again")
        return None
    except OSError as err:
        raise _store_error(remote.child(MARKER), "reading", err) from None


def fetch(remote: Location, dest: Path) -> bool:
    """Download the entry published at `remote` into the local folder `dest` (verified file by
    file, renamed in whole). False when there is no whole entry there (absent, or damaged: said
    on stderr); StoreUnavailable when the store cannot be used."""
    return _fetched(remote, dest, folders.fetch)


def fetch_file(remote: Location, dest: Path) -> bool:
    """`fetch` for an entry that is one file (a tokenizer): downloaded beside `dest`, verified,
    renamed onto it."""
    return _fetched(remote, dest, folders.fetch_file)


def _fetched(remote: Location, dest: Path, get: Callable[..., folders.Manifest]) -> bool:
    manifest = read_manifest(remote)
    if manifest is None:
        return False
    try:
        get(remote, dest, name=MARKER, manifest=manifest)
    except (Damaged, UnsafeName) as err:
        _say(f"the published entry {remote.uri} is damaged ({err}); building it again")
        _withdraw(remote, manifest.build)
        return False
    except OSError as err:
        raise _store_error(remote, "downloading", err) from None
    return True


def withdraw(remote: Location) -> None:
    """Take down the entry published at `remote` (found unusable after a verified download)."""
    manifest = read_manifest(remote, quiet=True)
    if manifest is not None:
        _withdraw(remote, manifest.build)


def _withdraw(remote: Location, build: str | None) -> None:
    """Take down a published entry found damaged (its manifest, if it still names `build`, then
    the build's files), so that the rebuilt one can be published in its place."""
    try:
        current = read_manifest(remote, quiet=True)
        if current is not None and current.build == build:
            remote.child(MARKER).delete()
        if build:
            remote.child(build).delete_tree()
    except OSError as err:
        _say(f"could not take down the damaged entry {remote.uri} ({reason(err)})")


def publish(source: Path, remote: Location) -> bool:
    """Upload the local folder (or single file) `source` as the entry at `remote`: its files into a
    fresh build folder, then the manifest, last. True when this call's folder is the one
    published; False when another publisher's whole entry was there first (this upload deleted)."""
    manifest = folders.Manifest(
        folders.manifest_of(source),
        folders.new_build_id(),
        {"published_at": time.time(), "by": {"host": socket.gethostname(), "pid": os.getpid()}},
    )
    mine = manifest.root(remote)
    try:
        folders.upload(source, mine, manifest.files)
        existing = read_manifest(remote, quiet=True)
        if existing is not None and _whole(remote, existing):
            mine.delete_tree()
            return False
        folders.put_manifest(remote, MARKER, manifest)
        settled = read_manifest(remote, quiet=True)
    except OSError as err:
        raise _store_error(remote, "uploading", err) from None
    if settled is not None and settled.build != manifest.build:
        mine.delete_tree()  # a later manifest names another publisher's whole folder
        return False
    return True


def _whole(remote: Location, manifest: folders.Manifest) -> bool:
    """Every file the manifest names is there with its size (hashes are checked on download)."""
    root = manifest.root(remote)
    try:
        return all(root.child(rel).size() == want.size and root.child(rel).is_file() for rel, want in manifest.files.items())
    except OSError:
        return False


def published(kind_root: Location) -> list[str]:
    """The keys under `kind_root` (e.g. GATESWEEP_CACHE/tokens) that have a manifest (one listing)."""
    try:
        return sorted({rel.split("/")[0] for rel in kind_root.files() if rel.count("/") == 1 and rel.endswith("/" + MARKER)})
    except OSError as err:
        raise _store_error(kind_root, "listing", err) from None


def lease_seconds() -> float:
    try:
        value = float(os.environ.get(LEASE_ENV, "60"))
    except ValueError:
        return 60.0
    return value if value > 0 else 60.0


@contextmanager
def lease(remote: Location, say: Callable[[str], None] | None = None) -> Iterator[bool]:
    """Hold the right to build the entry at `remote` across nodes (`storage.lease` on LEASE.json,
    stale after GATESWEEP_CACHE_LEASE_S seconds, refreshed every quarter of that). Yields True
    while this process holds it, or False as soon as a manifest appears while waiting for another
    node's build (the caller then downloads it)."""
    say = say or _say
    ttl = lease_seconds()
    lock = lease_for(remote.child(LEASE), heartbeat_s=ttl / 4, stale_s=ttl)
    told = False
    try:
        while not lock.acquire():
            if read_manifest(remote, quiet=True) is not None:
                yield False
                return
            if not told:
                say(f"waiting for {_describe(lock.holder())} preparing {remote.uri}")
                told = True
            time.sleep(min(1.0, ttl / 4))
    except OSError as err:
        raise _store_error(remote.child(LEASE), "taking the lease", err) from None
    if lock.took_over:
        say(f"the lease on {remote.uri} was not renewed ({lock.took_over.get('why')}); taking it over")
    try:
        yield True
    finally:
        lock.release()


def _describe(holder: dict) -> str:
    try:
        return f"pid {int(holder['pid'])} on {str(holder['host'])[:64]}"
    except (ValueError, KeyError, TypeError):
        return "another node"
