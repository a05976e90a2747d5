"""Names a store or a file gives stay inside their folder.

Every relative name that comes from outside the process (a manifest's file list, a shard index, a
lock or state file, a listing of an object store) passes `safe_relpath` before it is joined to a
folder, and a local path built from one passes `confined` before anything is written there:
plain names joined by `/`, none empty, `.` or `..`, no absolute path, no backslash or control
character, and
no link on the way (a link inside a local folder can point anywhere).
"""

from __future__ import annotations

import re
from pathlib import Path

from .errors import UnsafeName

PART = re.compile(r"[^/\\\x00-\x1f\x7f]{1,255}")
"""One name of a path: up to 255 characters, none a slash, a backslash or a control character."""
MAX_PARTS = 32


def unsafe_reason(rel: object) -> str:
    """Why `rel` is not a safe relative name ('' when it is one)."""
    if not isinstance(rel, str):
        return f"not a text but {type(rel).__name__}"
    if not rel:
        return "an empty name"
    if rel.startswith("/"):
        return "an absolute path"
    parts = rel.split("/")
    if len(parts) > MAX_PARTS:
        return f"more than {MAX_PARTS} levels deep"
    for part in parts:
        if part in ("", ".", ".."):
            return f"a {part!r} part" if part else "an empty part ('//')"
        if not PART.fullmatch(part):
            return f"the part {part[:40]!r} (at most 255 characters, no backslash or control character)"
    return ""


def safe_relpath(rel: object, where: str = "") -> str:
    """`rel` itself when it is a safe relative name; `UnsafeName` naming `where` otherwise."""
    why = unsafe_reason(rel)
    if why:
        shown = repr(rel)[:80]
        raise UnsafeName(f"{where + ': ' if where else ''}the name {shown} leaves its folder or is not a plain name ({why})")
    return rel  # type: ignore[return-value]


def confined(root: str | Path, rel: object, where: str = "") -> Path:
    """The local path of `rel` under `root`, refused (`UnsafeName`) when `rel` is not a safe name
    or when a link sits on the way from `root` to it."""
    root = Path(root)
    name = safe_relpath(rel, where or str(root))
    path = root
    for part in name.split("/"):
        path = path / part
        if path.is_symlink():
            raise UnsafeName(f"{where or root}: {name!r} goes through the link {path}; refused")
    return path
