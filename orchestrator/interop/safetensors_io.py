"""The safetensors format, read and written with torch alone (no `safetensors` package at run time).

A file is an 8-byte little-endian header length N, N bytes of JSON (`{name: {"dtype", "shape",
"data_offsets": [begin, end]}, "__metadata__": {str: str}}`), then the tensors' bytes, C order,
little-endian (https://github.com/huggingface/safetensors, "Format"). A folder holds
`model.safetensors`, or shards listed by `model.safetensors.index.json` (`{"weight_map": {name:
file}}`). Every way a file can be damaged (truncated, a header that is not JSON, offsets out of
range or overlapping) is an `InteropError` naming the file.
"""

from __future__ import annotations

import json
import mmap
import struct
from pathlib import Path

import torch

from .errors import InteropError

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
CODES = {v: k for k, v in DTYPES.items()}
MAX_HEADER = 100 << 20  # the reference implementation's limit
WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"


def save_file(tensors: dict[str, torch.Tensor], path: str | Path, metadata: dict[str, str] | None = None) -> Path:
    """Write `tensors` (any device, any supported dtype) to `path`, atomically (a temporary file renamed)."""
    path = Path(path)
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    blobs = []
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        if t.dtype not in CODES:
            raise InteropError(f"{name}: dtype {t.dtype} has no safetensors code")
        raw = t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": CODES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)
    tmp.replace(path)
    return path


def load_file(path: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of one safetensors file (copied out of the file, so it may be closed or replaced)."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            size = path.stat().st_size
            if size < 8:
                raise InteropError(f"{path}: not a safetensors file ({size} bytes, shorter than its header length)")
            (n,) = struct.unpack("<Q", f.read(8))
            if n > MAX_HEADER or 8 + n > size:
                raise InteropError(f"{path}: not a safetensors file (header length {n} for a file of {size} bytes)")
            try:
                header = json.loads(f.read(n))
            except (UnicodeDecodeError, ValueError):
                raise InteropError(f"{path}: damaged safetensors file (its header is not JSON)") from None
            if not isinstance(header, dict):
                raise InteropError(f"{path}: damaged safetensors file (its header is not a JSON object)")
            header.pop("__metadata__", None)
            data_len = size - 8 - n
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) as mm:  # copy-on-write: a writable buffer for torch
                return {name: _tensor(path, name, entry, mm, 8 + n, data_len) for name, entry in header.items()}
    except OSError as err:
        raise InteropError(f"{path}: cannot be read ({err.strerror or err})") from None


def _tensor(path: Path, name: str, entry: object, mm: mmap.mmap, start: int, data_len: int) -> torch.Tensor:
    if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= set(entry):
        raise InteropError(f"{path}: damaged safetensors file (entry {name!r} lacks dtype, shape or data_offsets)")
    dtype = DTYPES.get(str(entry["dtype"]))
    if dtype is None:
        raise InteropError(f"{path}: tensor {name!r} has dtype {entry['dtype']!r}; supported: {', '.join(DTYPES)}")
    shape, offsets = entry["shape"], entry["data_offsets"]
    ok = isinstance(shape, list) and all(isinstance(s, int) and s >= 0 for s in shape)
    ok = ok and isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)
    if not ok:
        raise InteropError(f"{path}: damaged safetensors file (entry {name!r} has a bad shape or offsets)")
    begin, end = offsets
    numel = 1
    for s in shape:
        numel *= s
    itemsize = torch.empty((), dtype=dtype).element_size()
    if not 0 <= begin <= end <= data_len or end - begin != numel * itemsize:
        raise InteropError(
            f"{path}: damaged safetensors file (tensor {name!r} needs bytes {begin}..{end} of {data_len}; is the file truncated?)"
        )
    if numel == 0:
        return torch.empty(shape, dtype=dtype)
    raw = torch.frombuffer(mm, dtype=torch.uint8, count=end - begin, offset=start + begin).clone()
    return raw.view(dtype).reshape(shape)


def load_folder(folder: str | Path) -> dict[str, torch.Tensor]:
    """The weights of a model folder: `model.safetensors`, or the shards its index names."""
    folder = Path(folder)
    index = folder / INDEX_NAME
    single = folder / WEIGHTS_NAME
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
            files = sorted(set(weight_map.values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            raise InteropError(f"{index}: not a safetensors index (expected {{'weight_map': {{name: file}}}})") from None
        out: dict[str, torch.Tensor] = {}
        for name in files:
            shard = folder / str(name)
            if not shard.is_file() or shard.parent != folder:
                raise InteropError(f"{index}: names the shard {name!r}, which is not in {folder}")
            out.update(load_file(shard))
        missing = sorted(set(weight_map) - set(out))
        if missing:
            raise InteropError(f"{index}: tensors missing from its shards: {', '.join(missing[:3])}")
        return out
    if single.is_file():
        return load_file(single)
    others = sorted(p.name for p in folder.glob("*.bin")) + sorted(p.name for p in folder.glob("*.pt"))
    hint = f" (found {', '.join(others[:3])}: convert them to safetensors first)" if others else ""
    raise InteropError(f"{folder}: no {WEIGHTS_NAME} or {INDEX_NAME}{hint}")
