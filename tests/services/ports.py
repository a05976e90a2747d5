"""A free TCP port on loopback."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on at `host` now, as the kernel picks one (two pytest workers
    starting servers at once do not meet on it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
