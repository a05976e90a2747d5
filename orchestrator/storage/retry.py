"""The one retry policy: a call that fails with a transient error is tried again after a pause
that doubles from 1 s up to 30 s, until a budget of seconds is spent; any other error is raised at
once. What is transient is decided by the error's type, never by the words of its message: each
caller passes its own predicate (`transient` here for the stores of this room; the tracking room
passes MLflow's), and `Backoff` is the one schedule, also for a caller that keeps its work and
tries later instead of waiting (the metric logger's buffer).

The object stores' budget is `GATESWEEP_STORE_RETRY_S` (default 300 s): long enough for a store
restarting, short enough that a trial does not wait forever on one that is gone.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from .errors import Damaged, NotAStore, StoreUnreachable, UnsafeName

T = TypeVar("T")
RETRY_ENV = "GATESWEEP_STORE_RETRY_S"
FIRST_S, CAP_S = 1.0, 30.0

PERMANENT: tuple[type[BaseException], ...] = (
    FileNotFoundError,
    FileExistsError,
    PermissionError,
    IsADirectoryError,
    NotADirectoryError,
    NotAStore,
)
"""OSErrors a retry cannot mend."""


def transient(err: BaseException) -> bool:
    """Whether a storage error is worth a retry: the store unreachable or busy (`StoreUnreachable`,
    a connection error, a timeout) or another OSError of a store (pyarrow's stores say little more);
    never a missing object, a refusal, an answer that is not the store's, a full local disk, an
    unsafe name or a damaged folder."""
    if isinstance(err, (StoreUnreachable, ConnectionError, TimeoutError)):
        return True
    if isinstance(err, (*PERMANENT, UnsafeName, Damaged, ValueError)):
        return False
    if isinstance(err, OSError):
        import errno

        return err.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG)
    return False


def budget() -> float:
    """`GATESWEEP_STORE_RETRY_S` (default 300)."""
    try:
        return max(0.0, float(os.environ.get(RETRY_ENV, "300")))
    except ValueError:
        return 300.0


@dataclass
class Backoff:
    """The pause before the next try: `first`, doubled after every failure up to `cap`."""

    first: float = FIRST_S
    cap: float = CAP_S
    _next: float = 0.0

    def __post_init__(self) -> None:
        self._next = self.first

    def next(self) -> float:
        """This pause, and the next one doubled."""
        wait, self._next = self._next, min(self._next * 2, self.cap)
        return wait

    def reset(self) -> None:
        self._next = self.first


def retried(
    fn: Callable[[], T],
    what: str,
    *,
    budget_s: float | None = None,
    is_transient: Callable[[BaseException], bool] = transient,
    say: Callable[[str], None] | None = None,
    on_error: Callable[[BaseException], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """`fn()`, tried again after a transient error (`is_transient`) with `Backoff` pauses until
    `budget_s` seconds (default `budget()`) have passed; then the last error is raised. `say`
    hears one line per retry (`what`: what is being done, for that line); `on_error` every
    transient error, before its pause."""
    limit = budget() if budget_s is None else budget_s
    deadline, pause, tries = time.monotonic() + limit, Backoff(), 0
    while True:
        try:
            return fn()
        except Exception as err:
            if not is_transient(err):
                raise
            tries += 1
            if on_error is not None:
                on_error(err)
            wait = pause.next()
            if time.monotonic() + wait > deadline:
                raise
            if say is not None:
                say(f"{what}: {type(err).__name__}: {' '.join(str(err).split())[:160]}; retry {tries} in {wait:.0f} s")
            sleep(wait)
