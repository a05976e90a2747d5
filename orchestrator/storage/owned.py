"""Files gatesweep writes into a folder that is also a user's (a report's --out): it replaces only
the files it wrote there before, and never a user's file of the same name.

The folder keeps a manifest of gatesweep's own files (`storage.folders`' format, `OWNED`): each
name with the size and sha256 it had when written. `replace(out, stage, names)` moves the staged
files in:

1. before anything in `out` changes, every name about to be written is checked: a file there
   that the manifest does not list, or whose content is no longer what was written (the user
   replaced or edited it), is not gatesweep's, and the whole replacement is refused
   (`NotOurs`, naming the files), the staged files removed;
2. the manifest is rewritten to list both the old and the new content of each name (so a
   replacement stopped halfway leaves every file still recognised), the files are renamed in
   one by one (each `os.replace` atomic), and files of the previous set that this one does not
   write are deleted, only while their content is still what was written, except those
   names matching a `keep` pattern (left alone, and still listed);
3. the manifest is written last with the new set.
"""

from __future__ import annotations

import os
from fnmatch import fnmatch
from pathlib import Path

from . import atomic
from .errors import Damaged
from .folders import Entry, Manifest, hash_file
from .names import safe_relpath, unsafe_reason

OWNED = ".gatesweep-files.json"


class NotOurs(FileExistsError):
    """Files in the folder with the names gatesweep would write, that gatesweep did not write."""


def owned(out: Path) -> dict[str, list[Entry]]:
    """name -> the contents gatesweep wrote under it (the manifest's entry, and during a
    replacement the one before); {} without a manifest. A damaged manifest owns nothing."""
    path = out / OWNED
    if not path.is_file() or path.is_symlink():
        return {}
    try:
        import json

        m = Manifest.from_dict(json.loads(path.read_bytes()[: 4 << 20]), str(path))
    except (OSError, ValueError, Damaged):
        return {}
    before = m.extra.get("replacing", {})
    out_map: dict[str, list[Entry]] = {rel: [e] for rel, e in m.files.items() if "/" not in rel}
    if isinstance(before, dict):
        for rel, e in before.items():
            if isinstance(e, dict) and not unsafe_reason(rel) and "/" not in rel and isinstance(e.get("sha256"), str):
                out_map.setdefault(rel, []).append(Entry(int(e.get("size", -1)), e["sha256"]))
    return out_map


def is_ours(path: Path, entries: list[Entry]) -> bool:
    """Whether the file at `path` still holds one of the contents gatesweep wrote there."""
    if path.is_symlink() or not path.is_file():
        return False
    have = hash_file(path)
    return any(have == e for e in entries)


def conflicts(out: Path, names: list[str]) -> list[str]:
    """The names of `names` that a file in `out` holds which gatesweep did not write."""
    mine = owned(out)
    present = [n for n in names if (out / n).exists() or (out / n).is_symlink()]
    return [n for n in present if not is_ours(out / n, mine.get(n, []))]


def replace(out: Path, stage: Path, names: list[str], *, keep: tuple[str, ...] = ()) -> None:
    """Move `names` from `stage` into `out` (the module's docstring; `keep`: glob patterns of
    earlier files to leave as they are); `NotOurs` when a user's file holds one of the names
    (nothing in `out` changed then). `stage` is removed once empty."""
    for n in names:
        safe_relpath(n, str(out))
    clash = conflicts(out, names)
    if clash:
        raise NotOurs(
            f"{out}: {', '.join(clash[:4])}{' ...' if len(clash) > 4 else ''} "
            f"{'is' if len(clash) == 1 else 'are'} not {'a file' if len(clash) == 1 else 'files'} an earlier report wrote; "
            "move them away or choose another --out (nothing was replaced)"
        )
    before = owned(out)
    new = {n: hash_file(stage / n) for n in names}
    kept = {n: e[0] for n, e in before.items() if n not in new and any(fnmatch(n, k) for k in keep) and is_ours(out / n, e)}
    replacing = {n: {"size": e[0].size, "sha256": e[0].sha256} for n, e in before.items()}
    _write(out, Manifest({**kept, **new}, extra={"replacing": replacing}))
    for n in names:
        os.replace(stage / n, out / n)
    for n, entries in before.items():
        if n not in new and n not in kept and is_ours(out / n, entries):
            (out / n).unlink(missing_ok=True)
    _write(out, Manifest({**kept, **new}))
    stage.rmdir()


def _write(out: Path, m: Manifest) -> None:
    atomic.write_json(out / OWNED, m.to_dict(), indent=1)
