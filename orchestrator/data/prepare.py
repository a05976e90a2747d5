"""Tokenize a text source once into token shards, shared by every trial and node that sees the cache.

`prepare(settings)` returns the `Prepared` corpus for a source, a tokenizer and a split: from the
cache when it is there and whole, else built by streaming the source's pieces (`documents`)
through the tokenizer in batches (HF `encode_batch`, which runs on every core) into `shards`.

- **Key**: (format version, the source's fingerprint, the tokenizer's fingerprint, val_fraction,
  max_chars, separator). seq_len is not in it: windows are cut when read, so a sweep over seq_len
  or seeds shares one corpus.
- **Concurrency**: the builder holds a `storage.FileLock` on `KEY.lock` beside the entry; other
  trials asking for the same key wait for it (saying who holds it), then read what it built. The
  entry is built in a staging folder and renamed into place (`storage.publish_folder`), so a
  reader never sees half a corpus, and a builder killed outright leaves only its staging folder,
  which the next builder removes.
- **Damage**: an entry whose meta.json does not parse or whose shards do not match it is rebuilt.
- **Object storage**: with GATESWEEP_CACHE=s3://bucket/prefix (any `storage.Location` URI) the
  entry is built in the node's local scratch cache and published to `PREFIX/tokens/KEY/` (files
  first, a manifest of sizes and sha256 last: `mirror`); a node whose local cache lacks it
  downloads and verifies the published one instead of tokenizing, and only one node builds a key
  at a time (the entry's lease).
- **Separator**: documents are joined by the tokenizer's end-of-text token (`auto` when it has
  one, or `eos`), else (`auto` for `byte` and `bpe:N`, which have none) by a blank line, which is
  what these corpora use between paragraphs; any other text is encoded and used as given.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import storage
from . import mirror
from .documents import Piece, source_fingerprint, split_pieces
from .shards import DamagedEntry, ShardWriter, TokenStream, token_dtype
from .sources import DataUnavailable
from .tokenizers import Tokenizer, build_tokenizer, cache_dir, remote_cache

FORMAT_VERSION = 2
BATCH_CHARS = 4 << 20  # text per encode_batch call


@dataclass(frozen=True)
class DataSettings:
    """What decides a prepared corpus (a `DataConfig` without what is cut at read time)."""

    source: str
    tokenizer: str = "byte"
    val_fraction: float = 0.05
    max_chars: int | None = None
    text_column: str = "text"
    hf_split: str = "train"
    separator: str = "auto"

    @classmethod
    def of(cls, cfg) -> DataSettings:
        return cls(cfg.source, cfg.tokenizer, cfg.val_fraction, cfg.max_chars, cfg.text_column, cfg.hf_split, cfg.separator)

    def pieces(self) -> Iterator[Piece]:
        return split_pieces(
            self.source, val_fraction=self.val_fraction, text_column=self.text_column, hf_split=self.hf_split, max_chars=self.max_chars
        )

    def fingerprint(self) -> list:
        return source_fingerprint(self.source, hf_split=self.hf_split, text_column=self.text_column)


@dataclass
class Prepared:
    folder: Path
    meta: dict
    tokenizer: Tokenizer
    fresh: bool = False
    """Built by this call (not found in the cache)."""
    downloaded: bool = False
    """Downloaded by this call from the object store behind GATESWEEP_CACHE (not built here)."""

    def stream(self, split: str) -> TokenStream:
        return TokenStream.open(self.folder, self.meta["splits"][split], np.dtype(self.meta["dtype"]))


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:20]


def resolve_tokenizer(settings: DataSettings, fingerprint: list | None = None) -> Tokenizer:
    """The settings' tokenizer; `bpe:N` is trained on the source's training pieces (streamed) and
    cached by (source, split, N). `fingerprint`: the source's, when the caller has it already."""
    fingerprint = settings.fingerprint() if fingerprint is None else fingerprint
    key = _digest([FORMAT_VERSION, fingerprint, settings.val_fraction, settings.max_chars])
    return build_tokenizer(settings.tokenizer, lambda: (p.text for p in settings.pieces() if not p.held_out), key)


def separator_ids(tok: Tokenizer, separator: str) -> np.ndarray:
    if separator in ("auto", "eos"):
        if tok.eos_id is not None:
            return np.array([tok.eos_id], dtype=np.int64)
        if separator == "eos":
            raise DataUnavailable(f"data.separator=eos: tokenizer {tok.name} has no end-of-text token; use auto or a text")
        separator = "\n\n"
    return tok.encode([separator])[0].astype(np.int64)


def prepare(
    settings: DataSettings, tokenizer: Tokenizer | None = None, *, progress: bool = False, say: Callable[[str], None] | None = None
) -> Prepared:
    """The prepared corpus for `settings` (with `tokenizer` if given: the held-out text of another
    source is encoded with a trial's own tokenizer), built now if the cache lacks it."""
    fingerprint = settings.fingerprint()  # stats every file of a local source: once per call
    tok = tokenizer or resolve_tokenizer(settings, fingerprint)
    key = _digest([FORMAT_VERSION, fingerprint, tok.fingerprint(), settings.val_fraction, settings.max_chars, settings.separator])
    entry = cache_dir("tokens") / key
    found = _open(entry, tok)
    if found is not None:
        return found
    say = say or (lambda m: print(m, file=sys.stderr))
    with _build_lock(entry, say):
        found = _open(entry, tok)
        if found is not None:
            return found
        remote = remote_cache("tokens")
        if remote is None:
            return _build_and_open(entry, settings, tok, progress)
        remote = remote.child(key)
        found = _fetch(remote, entry, tok, say)
        if found is not None:
            return found
        with mirror.lease(remote, say) as held:
            found = _fetch(remote, entry, tok, say)  # published while this node waited for the lease
            if found is None:
                if not held:
                    say(f"building {remote.uri} here too: the entry another node published cannot be used")
                found = _build_and_open(entry, settings, tok, progress)
                try:
                    if mirror.publish(entry, remote):
                        say(f"published {entry.name} to {remote.uri}")
                except mirror.StoreUnavailable as err:  # the corpus is whole here: use it, say what was lost
                    say(f"warning: {err}; {entry} is used here, other nodes will prepare it themselves")
    return found


def _build_and_open(entry: Path, settings: DataSettings, tok: Tokenizer, progress: bool) -> Prepared:
    _build(entry, settings, tok, progress)
    found = _open(entry, tok)
    if found is None:
        raise DataUnavailable(f"{settings.source}: the prepared corpus at {entry} cannot be read back")
    found.fresh = True
    return found


def _fetch(remote, entry: Path, tok: Tokenizer, say: Callable[[str], None]) -> Prepared | None:
    """The entry downloaded from the object store into the local cache, if it is published whole
    (and its files agree with its meta.json), else None."""
    t0 = time.perf_counter()
    if not mirror.fetch(remote, entry):
        return None
    found = _open(entry, tok)
    if found is None:  # its files match the manifest but not a prepared corpus: not ours to trust
        say(f"the published entry {remote.uri} is not a whole prepared corpus; building it again")
        shutil.rmtree(entry, ignore_errors=True)
        mirror.withdraw(remote)
        return None
    found.downloaded = True
    size = sum(p.stat().st_size for p in entry.iterdir() if p.is_file())
    say(f"downloaded {remote.uri} ({size / 1e6:.1f} MB, verified) in {time.perf_counter() - t0:.1f} s instead of tokenizing")
    return found


def _open(entry: Path, tok: Tokenizer) -> Prepared | None:
    """The entry if it is whole (its meta parses and every shard has the size it says), else None."""
    try:
        meta = json.loads((entry / "meta.json").read_text())
        prepared = Prepared(entry, meta, tok)
        for split in ("train", "val"):
            prepared.stream(split)
        return prepared
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, DamagedEntry) as err:
        print(f"gatesweep: the prepared corpus {entry} is damaged ({err}); building it again", file=sys.stderr)
        return None


@contextmanager
def _build_lock(entry: Path, say: Callable[[str], None]):
    lock = storage.FileLock(entry.with_name(entry.name + ".lock"), preparing=str(entry))
    if not lock.acquire(blocking=False):
        say(f"waiting for {storage.describe_holder(lock.holder())} preparing {entry}")
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def _build(entry: Path, settings: DataSettings, tok: Tokenizer, progress: bool) -> None:
    storage.remove_leftovers(entry)  # staging folders of builders killed outright (we hold the lock)
    shutil.rmtree(entry, ignore_errors=True)  # a damaged entry

    def build(folder: Path) -> None:
        meta = _write_shards(folder, settings, tok, progress)
        if tok.hf is not None:
            tok.hf.save(str(folder / "tokenizer.json"))
        (folder / "meta.json").write_text(json.dumps(meta, indent=1))

    storage.publish_folder(entry, build)


def _write_shards(folder: Path, settings: DataSettings, tok: Tokenizer, progress: bool) -> dict:
    dtype = token_dtype(tok.vocab_size)
    sep = separator_ids(tok, settings.separator)
    writers = {s: ShardWriter(folder, s, dtype) for s in ("train", "val")}
    counts = {s: {"documents": 0, "pieces": 0, "chars": 0} for s in writers}
    last_doc: dict[str, int | None] = {s: None for s in writers}
    bar = _progress(settings) if progress else None
    t0 = time.perf_counter()
    batch: list[Piece] = []

    def flush() -> None:
        for piece, ids in zip(batch, tok.encode([p.text for p in batch])):
            split = "val" if piece.held_out else "train"
            if last_doc[split] != piece.doc:
                if last_doc[split] is not None:
                    writers[split].write(sep)
                counts[split]["documents"] += 1
                last_doc[split] = piece.doc
            writers[split].write(ids)
            counts[split]["pieces"] += 1
            counts[split]["chars"] += len(piece.text)
        if bar is not None:
            bar.update(sum(len(p.text.encode("utf-8")) for p in batch))
            bar.set_postfix_str(f"{sum(w.tokens for w in writers.values()) / (time.perf_counter() - t0) / 1e6:.2f} M tokens/s")
        batch.clear()

    chars, documents = 0, 0
    for piece in settings.pieces():
        documents = piece.doc + 1
        batch.append(piece)
        chars += len(piece.text)
        if chars >= BATCH_CHARS:
            flush()
            chars = 0
    flush()
    if bar is not None:
        bar.close()
    seconds = time.perf_counter() - t0
    splits = {s: {**w.close(), **counts[s]} for s, w in writers.items()}
    total = sum(s["tokens"] for s in splits.values())
    return {
        "version": FORMAT_VERSION,
        "source": settings.source,
        "settings": {k: v for k, v in settings.__dict__.items() if k != "source"},
        "fingerprint": settings.fingerprint(),
        "tokenizer": {"name": tok.name, "vocab_size": tok.vocab_size, "bos_id": tok.bos_id, "eos_id": tok.eos_id},
        "separator_ids": sep.tolist(),
        "dtype": dtype.str,
        "documents": documents,
        "splits": splits,
        "built": {"seconds": round(seconds, 3), "tokens_per_s": round(total / max(seconds, 1e-9)), "at": time.time()},
    }


def _progress(settings: DataSettings):
    from tqdm.auto import tqdm

    total = None
    if not settings.source.startswith("hf:") and settings.max_chars is None:
        stamps = settings.fingerprint()[0]
        if isinstance(stamps, list):
            total = sum(s[1] for s in stamps) or None
    return tqdm(total=total, unit="B", unit_scale=True, desc=f"prepare {settings.source}", file=sys.stderr, mininterval=1.0)


def cached_entries() -> list[dict]:
    """Every prepared corpus in the cache: key, source, tokenizer, tokens per split, size on disk."""
    rows = []
    for meta_path in sorted(cache_dir("tokens").glob("*/meta.json")):
        if meta_path.parent.name.startswith("."):  # a staging folder (storage.publish_folder)
            continue
        try:
            meta = json.loads(meta_path.read_text())
            size = sum(p.stat().st_size for p in meta_path.parent.iterdir() if p.is_file())
            rows.append(
                {
                    "key": meta_path.parent.name,
                    "source": meta["source"],
                    "tokenizer": meta["tokenizer"]["name"],
                    "train_tokens": meta["splits"]["train"]["tokens"],
                    "val_tokens": meta["splits"]["val"]["tokens"],
                    "documents": meta["documents"],
                    "size_bytes": size,
                    "built_at": meta["built"]["at"],
                }
            )
        except (OSError, ValueError, KeyError, TypeError):
            rows.append({"key": meta_path.parent.name, "source": "? (damaged: rebuilt on next use)"})
    return rows
