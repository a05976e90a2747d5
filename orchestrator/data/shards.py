"""Token shards: a tokenized corpus on disk, read through memory maps.

A prepared corpus is a folder (see `prepare`):

    meta.json          what was built: the source, the tokenizer, the dtype, and per split its
                       shards [file, tokens], documents, pieces and characters
    train-00000.bin    raw little-endian token ids, uint16 when the vocabulary fits, else uint32,
    ...                at most SHARD_TOKENS per file; documents are joined by the separator
    val-00000.bin
    tokenizer.json     the HF tokenizer, when there is one

A split is read as one concatenated stream (`TokenStream`): a window is copied out of the
memory maps when a batch asks for it, so a trial holds its current batches, not its corpus.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

SHARD_TOKENS = 1 << 27  # 256 MiB of uint16 per file


class DamagedEntry(RuntimeError):
    """A prepared corpus on disk does not match its meta.json (truncated, missing or foreign files)."""


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype("<u2") if vocab_size <= 1 << 16 else np.dtype("<u4")


class ShardWriter:
    """Appends token ids to `folder/SPLIT-NNNNN.bin`, starting a new file every `shard_tokens`."""

    def __init__(self, folder: Path, split: str, dtype: np.dtype, shard_tokens: int = SHARD_TOKENS):
        self.folder, self.split, self.dtype, self.shard_tokens = folder, split, dtype, shard_tokens
        self.shards: list[list] = []  # [file name, tokens]
        self._fh = None
        self.tokens = 0

    def _open_next(self) -> None:
        if self._fh is not None:
            self._fh.close()
        name = f"{self.split}-{len(self.shards):05d}.bin"
        self._fh = open(self.folder / name, "wb")  # noqa: SIM115 - kept open across write() calls, closed by close()
        self.shards.append([name, 0])

    def write(self, ids: np.ndarray) -> None:
        ids = np.asarray(ids)
        if ids.size and int(ids.max()) > np.iinfo(self.dtype).max:
            raise ValueError(f"token id {int(ids.max())} does not fit {self.dtype.name}")
        ids = ids.astype(self.dtype, copy=False)
        while ids.size:
            if self._fh is None or self.shards[-1][1] >= self.shard_tokens:
                self._open_next()
            room = self.shard_tokens - self.shards[-1][1]
            part, ids = ids[:room], ids[room:]
            self._fh.write(part.tobytes())
            self.shards[-1][1] += int(part.size)
            self.tokens += int(part.size)

    def close(self) -> dict:
        if self._fh is not None:
            self._fh.flush()
            self._fh.close()
            self._fh = None
        return {"shards": self.shards, "tokens": self.tokens}


class TokenStream:
    """The tokens of one split, concatenated over its shards (memory maps, or arrays in tests)."""

    def __init__(self, parts: list[np.ndarray]):
        self.parts = [p for p in parts if len(p)]
        self.starts = np.cumsum([0, *(len(p) for p in self.parts)])

    @classmethod
    def open(cls, folder: Path, split_info: dict, dtype: np.dtype) -> TokenStream:
        """Memory-map a split's shards; DamagedEntry if a file is missing or its size is not its token count."""
        parts = []
        for name, tokens in split_info["shards"]:
            path = folder / name
            want = int(tokens) * dtype.itemsize
            try:
                size = path.stat().st_size
            except OSError:
                raise DamagedEntry(f"{path} is missing") from None
            if size != want:
                raise DamagedEntry(f"{path} has {size} bytes, its meta.json says {want}")
            if tokens:
                parts.append(np.memmap(path, dtype=dtype, mode="r"))
        return cls(parts)

    def __len__(self) -> int:
        return int(self.starts[-1])

    def read(self, start: int, n: int) -> np.ndarray:
        """Tokens [start, start + n) as int64, across shard boundaries."""
        if start < 0 or start + n > len(self):
            raise IndexError(f"tokens [{start}, {start + n}) outside a stream of {len(self)}")
        out = np.empty(n, dtype=np.int64)
        k = int(np.searchsorted(self.starts, start, side="right")) - 1
        done = 0
        while done < n:
            part, offset = self.parts[k], start + done - int(self.starts[k])
            take = min(n - done, len(part) - offset)
            out[done : done + take] = part[offset : offset + take]
            done, k = done + take, k + 1
        return out
