"""The `--out` folder of `export` and `import`: written whole or not at all, and never a folder
that holds what the command did not write.

`staged(out, force=..., keep=[...])` refuses, before anything is read or written:
- an `--out` that is a file, or that is (or holds) one of the `keep` paths: the source, the working
  folder, a tokenizer passed in;
- a non-empty `--out` without `--force`, and with `--force` one gatesweep did not write (its
  files are not exactly those of an export or an import, or its own record of being one is
  missing): `--force` replaces a previous export or import, nothing else.
It yields a temporary sibling folder (`.NAME.tmp-PID`) to write into; on success that folder is
renamed to `--out` (a replaced folder is renamed away first and removed last), on any failure it
is removed, so a refused or failed command leaves `--out` as it was.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path

from .errors import InteropError
from .weights_files import metadata

EXPORT_FILES = frozenset(
    {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "generation_config.json",
        "config.yaml",
    }
)
"""What an export writes (`--format hf` / `official`: config.json ...; `gatesweep`: config.yaml + model.safetensors)."""
IMPORT_FILES = frozenset({"model.pt", "tokenizer.json", "config.yaml", "import.json"})
"""What an import writes."""
META_KEY = "gatesweep"
"""config.json key under which an HF export records the gatesweep model config (its signature)."""


def _is_within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def written_by_gatesweep(folder: Path) -> str | None:
    """None when `folder` is a previous export or import (only the files one writes, and its own
    record: import.json, config.json's `gatesweep` record, or a gatesweep-format model.safetensors);
    else what is in it that gatesweep did not write."""
    entries = sorted(folder.iterdir())
    foreign = [p.name + ("/" if p.is_dir() else "") for p in entries if not p.is_file() or p.is_symlink()]
    names = {p.name for p in entries if p.is_file() and not p.is_symlink()}
    if foreign:
        return ", ".join(foreign[:3])
    if names <= IMPORT_FILES and "import.json" in names:
        return None
    if names <= EXPORT_FILES:
        if "config.json" in names:
            try:
                meta = json.loads((folder / "config.json").read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, ValueError):
                meta = None
            if isinstance(meta, dict) and isinstance(meta.get(META_KEY), dict):
                return None
        elif {"config.yaml", "model.safetensors"} <= names and _gatesweep_weights(folder / "model.safetensors"):
            return None
    extra = sorted(names - EXPORT_FILES - IMPORT_FILES)
    return ", ".join(extra[:3]) if extra else f"{', '.join(sorted(names)[:3])} without gatesweep's record of writing them"


def _gatesweep_weights(path: Path) -> bool:
    try:
        return metadata(path).get("format") == "gatesweep"
    except InteropError:
        return False


def check_out(out: Path, *, force: bool, keep: Iterable[Path | str | None] = ()) -> Path:
    """`out` resolved, or InteropError naming why it cannot be written (see the module docstring)."""
    out = Path(out).expanduser().resolve()
    if out.exists() and not out.is_dir():
        raise InteropError(f"--out: {out} is a file")
    protected = [("the working folder", Path.cwd().resolve())]
    protected += [("the source", Path(p).expanduser().resolve()) for p in keep if p]
    for what, path in protected:
        if _is_within(path, out):
            same = "is" if path == out else "holds"
            raise InteropError(f"--out: {out} {same} {what} ({path}); pick another folder")
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise InteropError(f"--out: {out} is not empty (--force replaces a previous export or import)")
        foreign = written_by_gatesweep(out)
        if foreign is not None:
            raise InteropError(
                f"--out: {out} holds files gatesweep did not write ({foreign}); --force replaces only a previous export or import"
            )
    return out


@contextlib.contextmanager
def staged(out: Path, *, force: bool, keep: Iterable[Path | str | None] = ()) -> Iterator[Path]:
    """Check `out` (`check_out`), yield a temporary sibling to write into, and put it in place as
    `out` when the block succeeds; remove it when the block fails."""
    out = check_out(out, force=force, keep=keep)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    except OSError as err:
        raise InteropError(f"--out: {out} cannot be created ({err.strerror or err})") from None
    try:
        yield tmp
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        if out.exists():
            out.rename(old)  # empty, or a previous export that check_out let --force replace
        try:
            tmp.rename(out)
        except OSError:
            if old.exists():
                old.rename(out)
            raise
        shutil.rmtree(old, ignore_errors=True)
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise InteropError(f"--out: writing {out} failed ({err.strerror or err})") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
