"""The tests' own processes connect to loopback only: `install()` wraps `socket.socket.connect`
(and `connect_ex`) so that a connection to any other address, made in a pytest process by any
library (boto3 asking the instance-metadata address for credentials, a telemetry client, a
mistyped URI), is refused at once and remembered; `attempts_since(n)` lists those made after the
n-th, so the autouse fixture fails the test that made one, naming the address and the caller.

Processes a test starts (sweeps, servers, Ray) are not covered here: the loopback tests watch
their sockets (`tests/orchestrator/test_loopback.py`). Nor are connections made below Python's
socket object (gRPC's C core in an in-process Ray driver) or datagrams (a DNS lookup): it guards
what Python code connects to, which is where boto3, MLflow's client and urllib3 connect."""

from __future__ import annotations

import errno
import socket
import traceback

from orchestrator.runtime.netpolicy import is_loopback

_attempts: list[str] = []
_original = {name: getattr(socket.socket, name) for name in ("connect", "connect_ex")}


def _beyond_loopback(sock: socket.socket, address) -> str | None:
    """The host of `address` when it is an IP connection beyond loopback, else None."""
    if sock.family not in (socket.AF_INET, socket.AF_INET6) or not isinstance(address, tuple) or not address:
        return None
    host = str(address[0])
    return None if is_loopback(host) else host


def _guarded(name: str):
    original = _original[name]

    def call(self, address):
        host = _beyond_loopback(self, address)
        if host is not None:
            caller = "".join(traceback.format_stack(limit=8)[:-1])
            _attempts.append(f"{name} to {address!r} from:\n{caller}")
            err = OSError(errno.ENETUNREACH, f"the tests connect to loopback only, not {host}")
            if name == "connect_ex":
                return err.errno
            raise err
        return original(self, address)

    call.__name__ = name
    return call


def install() -> None:
    for name in _original:
        setattr(socket.socket, name, _guarded(name))


def attempts_since(n: int) -> list[str]:
    return _attempts[n:]


def count() -> int:
    return len(_attempts)
