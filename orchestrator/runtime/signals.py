"""Signals during a sweep: SIGTERM (kill, batch schedulers) and SIGHUP (a closed terminal) stop it
the way Ctrl-C does, as KeyboardInterrupt in the main thread. The first of them stops; every later
one is noted, not acted on, until the sweep has settled (Ray stopped, runs closed): an impatient
second or third Ctrl-C can no longer cut the teardown short and leave Ray's processes or a
RUNNING parent run behind. A Ray start is never cut in half (`deferred`): a signal during it is
acted on once Ray is up and its processes are recorded."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading

INTERRUPTING = (signal.SIGTERM, signal.SIGHUP)
STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_stopping = False
"""Set by the first stopping signal inside `as_interrupt`: the later ones are only noted."""


def _noted(signum, frame):
    print("gatesweep: stopping, please wait", file=sys.stderr, flush=True)


def _interrupt(signum, frame):
    global _stopping
    _stopping = True
    for sig in STOPPING:  # from now on: noted, not acted on (the teardown must run to its end)
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, _noted)
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def install_interrupt() -> None:
    """(Re)install the handlers; ray.init replaces SIGTERM's with its own sys.exit. After the
    first stopping signal, the later ones stay noted."""
    if threading.current_thread() is threading.main_thread():
        for sig in INTERRUPTING:
            signal.signal(sig, _noted if _stopping else _interrupt)


@contextlib.contextmanager
def as_interrupt():
    """SIGTERM (kill, batch schedulers), SIGHUP (a closed terminal) and Ctrl-C stop the sweep as
    KeyboardInterrupt in the main thread, once; later signals are noted. Handlers are restored
    afterwards. A SIGINT ignored on entry (a shell's background job) stays ignored."""
    global _stopping
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.getsignal(sig) for sig in STOPPING}
    was = _stopping
    _stopping = False
    install_interrupt()
    if saved[signal.SIGINT] is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _interrupt)
    try:
        yield
    finally:
        for sig, handler in saved.items():
            if handler is not None:  # None: installed outside Python, left as it is
                signal.signal(sig, handler)
        _stopping = was


@contextlib.contextmanager
def ignored():
    """While Ray shuts down and the runs are settled, further SIGINT/SIGTERM/SIGHUP are noted, not acted on."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.getsignal(sig) for sig in STOPPING}
    for sig in STOPPING:
        if saved[sig] is not signal.SIG_IGN:
            signal.signal(sig, _noted)
    try:
        yield
    finally:
        for sig, handler in saved.items():
            if handler is not None:  # None: installed outside Python, left as it is
                signal.signal(sig, handler)


@contextlib.contextmanager
def deferred():
    """A stopping signal during the block is held until the block ends, then delivered again to
    the handlers of before (a Ray start interrupted half way leaves processes no one recorded)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    saved = {sig: signal.getsignal(sig) for sig in STOPPING}
    for sig in STOPPING:
        if saved[sig] is not signal.SIG_IGN:
            signal.signal(sig, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        for sig, handler in saved.items():
            if handler is not None:  # None: installed outside Python, left as it is
                signal.signal(sig, handler)
        if held:
            signal.raise_signal(held[0])
