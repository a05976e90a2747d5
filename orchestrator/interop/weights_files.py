"""Safetensors weights through the `safetensors` package: headers first, tensors read lazily,
written without copies.

A folder holds `model.safetensors`, or shards listed by `model.safetensors.index.json`
(`{"weight_map": {name: file}}`). `folder_headers` reads only the headers (names, dtypes,
shapes: `safe_open` maps the file, it reads no tensor), so a caller can refuse a tensor it does not
know, one of the wrong dtype (integer or boolean weights), one larger than the whole model it
describes, or a model larger than the memory this machine has, before a byte of tensor data is
read (`check_headers`); `LazyTensors` then reads each tensor when it is asked for. Every way a
file can be damaged (truncated, a header that is not JSON, offsets out of range or overlapping)
is an `InteropError` naming the file. `save_file` hands the tensors' memory to the writer as it
is (no copy into Python bytes) and renames a temporary file into place.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from orchestrator.storage.names import unsafe_reason

from .errors import InteropError

WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"
DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
FLOATING = ("F64", "F32", "F16", "BF16")
"""The dtypes a weight may have."""


@dataclass(frozen=True)
class TensorInfo:
    """One tensor as its file's header describes it."""

    file: Path
    dtype: str
    """The safetensors dtype code (F32, BF16, I64, ...)."""
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        dtype = DTYPES.get(self.dtype)
        itemsize = dtype.itemsize if dtype is not None else 1
        return self.numel * itemsize

    def meta(self) -> torch.Tensor:
        """A tensor of this shape and dtype on the meta device (no memory): for checks."""
        return torch.empty(self.shape, dtype=DTYPES.get(self.dtype, torch.float32), device="meta")


def _open(path: Path):
    """`safe_open(path)`, its errors as one line naming the file."""
    from safetensors import SafetensorError, safe_open

    if not path.is_file():
        raise InteropError(f"{path}: not a regular file")
    size = path.stat().st_size
    try:
        return safe_open(str(path), framework="pt")
    except SafetensorError as err:
        text = str(err).removeprefix("Error while deserializing header: ")
        if "header too small" in text or "header too large" in text:
            raise InteropError(f"{path}: not a safetensors file ({size} bytes; {text})") from None
        if "invalid JSON" in text:
            raise InteropError(
                f"{path}: damaged safetensors file (its header is not JSON: {text.split(':', 1)[-1].strip()[:120]})"
            ) from None
        raise InteropError(f"{path}: damaged safetensors file ({text[:160]}; is the file truncated?)") from None
    except OSError as err:
        raise InteropError(f"{path}: cannot be read ({err.strerror or err})") from None


def headers(path: str | Path) -> dict[str, TensorInfo]:
    """Every tensor of one file as its header describes it; no tensor data is read."""
    path = Path(path)
    with _open(path) as f:
        out = {}
        names = f.keys()  # safe_open is not iterable
        for name in names:
            sl = f.get_slice(name)
            out[name] = TensorInfo(path, str(sl.get_dtype()), tuple(int(s) for s in sl.get_shape()))
        return out


def metadata(path: str | Path) -> dict[str, str]:
    """The file's `__metadata__` (text only)."""
    with _open(Path(path)) as f:
        return dict(f.metadata() or {})


def folder_headers(folder: str | Path) -> dict[str, TensorInfo]:
    """The tensors of a model folder, from `model.safetensors` or the shards its index names."""
    folder = Path(folder)
    index = folder / INDEX_NAME
    single = folder / WEIGHTS_NAME
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            files = sorted({str(v) for v in weight_map.values()})
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError):
            raise InteropError(f"{index}: not a safetensors index (expected {{'weight_map': {{name: file}}}})") from None
        out: dict[str, TensorInfo] = {}
        for name in files:
            if unsafe_reason(name) or "/" in name:  # '../x', '/abs', 'sub/../x': never joined to the folder
                raise InteropError(f"{index}: names the shard {name!r}, which is not in {folder}")
            shard = folder / name
            if not shard.is_file():
                raise InteropError(f"{index}: names the shard {name!r}, which is not in {folder}")
            out.update(headers(shard))
        missing = sorted(set(weight_map) - set(out))
        if missing:
            raise InteropError(f"{index}: tensors missing from its shards: {', '.join(missing[:3])}")
        return out
    if single.is_file():
        return headers(single)
    others = sorted(p.name for p in folder.glob("*.bin")) + sorted(p.name for p in folder.glob("*.pt"))
    hint = f" (found {', '.join(others[:3])}: convert them to safetensors first)" if others else ""
    raise InteropError(f"{folder}: no {WEIGHTS_NAME} or {INDEX_NAME}{hint}")


def _size(n: float) -> str:
    return f"{n / 2**30:,.2f} GiB" if n >= 2**30 else f"{n / 2**20:,.1f} MiB"


def check_headers(infos: Mapping[str, TensorInfo], where: str, *, max_numel: int, skip: tuple[str, ...] = ()) -> None:
    """Refuse, from the headers alone: a weight that is not floating point, a tensor with more
    elements than `max_numel` (the whole model it should belong to), and weights larger than the
    memory this machine has available. Names starting with `skip` are never read and not checked."""
    import psutil

    used = {k: v for k, v in infos.items() if not k.startswith(skip)}
    for name, info in used.items():
        if info.dtype not in FLOATING:
            raise InteropError(f"{where}: tensor {name} has dtype {info.dtype}; weights must be floating point ({', '.join(FLOATING)})")
        if info.numel > max_numel:
            raise InteropError(
                f"{where}: tensor {name} declares shape {list(info.shape)} ({_size(info.nbytes)}), more elements than the whole "
                f"model of this config has ({max_numel:,}); nothing was read"
            )
    total, have = sum(i.nbytes for i in used.values()), psutil.virtual_memory().available
    if total > have:
        raise InteropError(f"{where}: the weights take {_size(total)}; this machine has {_size(have)} of memory available")


class LazyTensors(Mapping[str, torch.Tensor]):
    """The tensors of `infos`, each read from its file when it is asked for (never all at once)."""

    def __init__(self, infos: Mapping[str, TensorInfo]):
        self.infos = dict(infos)

    def __getitem__(self, name: str) -> torch.Tensor:
        info = self.infos[name]
        from safetensors import SafetensorError

        try:
            with _open(info.file) as f:
                return f.get_tensor(name)
        except (SafetensorError, OSError) as err:
            raise InteropError(f"{info.file}: tensor {name} cannot be read ({str(err)[:160]})") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.infos)

    def __len__(self) -> int:
        return len(self.infos)

    def __contains__(self, name: object) -> bool:
        return name in self.infos


def load_file(path: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of one safetensors file."""
    lazy = LazyTensors(headers(path))
    return {name: lazy[name] for name in lazy}


def load_folder(folder: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of a model folder (single file or shards)."""
    lazy = LazyTensors(folder_headers(folder))
    return {name: lazy[name] for name in lazy}


def save_file(tensors: Mapping[str, torch.Tensor], path: str | Path, metadata: dict[str, str] | None = None) -> Path:
    """Write `tensors` (any device) to `path` through a temporary file renamed into place. The
    writer reads each tensor's memory in place; only tensors that are not contiguous CPU tensors,
    or that share memory with another (tied weights), are copied first."""
    from safetensors.torch import save_file as write

    path = Path(path)
    seen: set[tuple[int, int]] = set()
    ready = {}
    for name in sorted(tensors):
        t = tensors[name].detach()
        if t.device.type != "cpu" or not t.is_contiguous():
            t = t.cpu().contiguous()
        key = (t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
        if t.numel() and key in seen:
            t = t.clone()
        seen.add(key)
        ready[name] = t
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        write(ready, str(tmp), metadata={str(k): str(v) for k, v in (metadata or {}).items()} or None)
        tmp.replace(path)
    except (ValueError, RuntimeError) as err:  # the writer's refusals (a sparse tensor, ...)
        raise InteropError(f"{path}: cannot be written as safetensors ({str(err).strip()[:160]})") from None
    finally:
        tmp.unlink(missing_ok=True)
    return path
