"""One way to wait for something in a test: a predicate polled until true or a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T], timeout: float, what: str, *, interval: float = 0.5, detail: Callable[[], str] | None = None
) -> T:
    """Poll `predicate` every `interval` seconds until it returns something truthy, and return that;
    after `timeout` seconds fail the test with an AssertionError naming what was awaited, followed
    by `detail()` (a log's text, say) where given."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}" + (f"\n{detail()}" if detail else ""))
        time.sleep(interval)
