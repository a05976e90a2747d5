"""Signals during a sweep: SIGTERM (kill, batch schedulers) and SIGHUP (a closed terminal) stop it
the way Ctrl-C does, as KeyboardInterrupt in the main thread; while Ray shuts down, further
signals are noted, not acted on."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading

INTERRUPTING = (signal.SIGTERM, signal.SIGHUP)


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def install_interrupt() -> None:
    """(Re)install the handlers; ray.init replaces SIGTERM's with its own sys.exit."""
    if threading.current_thread() is threading.main_thread():
        for sig in INTERRUPTING:
            signal.signal(sig, _interrupt)


@contextlib.contextmanager
def as_interrupt():
    """SIGTERM (kill, batch schedulers) and SIGHUP (a closed terminal) stop the sweep the way
    Ctrl-C does: as KeyboardInterrupt in the main thread. Handlers are restored afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.getsignal(sig) for sig in INTERRUPTING}
    install_interrupt()
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def ignored():
    """While Ray shuts down, further SIGINT/SIGTERM/SIGHUP are noted, not acted on."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    saved = {sig: signal.getsignal(sig) for sig in sigs}
    for sig in sigs:
        signal.signal(sig, lambda signum, frame: print("gatesweep: stopping Ray, please wait", file=sys.stderr, flush=True))
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
