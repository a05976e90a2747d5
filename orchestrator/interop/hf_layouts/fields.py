"""Typed reads of an HF config.json, each failure one line naming the field (`from_hf` and the
per-layout readers of `mappings` and `laguna` read through one `Fields`)."""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable
from typing import Any

from ..errors import InteropError


class Fields:
    """The fields of one config.json (`c`, defaults merged in) and where it came from."""

    def __init__(self, config: dict[str, Any], where: str):
        self.c, self.where = config, where

    def fail(self, key: str, text: str) -> InteropError:
        return InteropError(f"{self.where}: {key}: {text}")

    def int(self, key: str, default: int | None = None, *, low: int = 1) -> int:
        value = self.c.get(key, default)
        if value is None and default is None:
            raise self.fail(key, "missing; expected an integer")
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise self.fail(key, f"got {value!r}; expected an integer >= {low}")
        return value

    def float(self, key: str, default: float | None = None) -> float:
        value = self.c.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.fail(key, f"got {value!r}; expected a number")
        return float(value)

    def bool(self, key: str, default: bool) -> bool:
        value = self.c.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(key, f"got {value!r}; expected true or false")
        return value

    def refuse(self, key: str, bad: Callable[[Any], builtins.bool], why: str) -> None:
        """InteropError when `key` is present and `bad` of its value (absent: the default, allowed)."""
        if key in self.c and bad(self.c[key]):
            raise self.fail(key, f"got {self.c[key]!r}; {why}")
