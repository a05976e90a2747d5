"""How config problems are reported: `Issue` (a dotted path and what is wrong there), `ConfigError`
(every issue found, raised together), and the short renderings the messages use: `show` for a user
value, `describe_range` for a numeric range, `did_you_mean` for a "did you mean" hint."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

MAX_ISSUES = 100
"""Issues rendered by one ConfigError; the rest are counted."""


@dataclass(frozen=True)
class Issue:
    """One problem found in a config: where it is and what is wrong."""

    path: str
    message: str

    def prefixed(self, prefix: str) -> Issue:
        if not prefix:
            return self
        return Issue(f"{prefix}.{self.path}" if self.path else prefix, self.message)

    def __str__(self) -> str:
        path = self.path if len(self.path) <= 200 else self.path[:197] + "..."
        message = self.message if len(self.message) <= 4000 else self.message[:3997] + "..."
        return f"{path}: {message}" if path else message


class ConfigError(ValueError):
    """Raised for invalid user configuration. Holds every issue found, not only the first."""

    def __init__(self, issues: list[Issue], source: str | None = None):
        self.issues = list(issues)
        self.source = source
        super().__init__(self.render())

    def render(self) -> str:
        head = f"{self.source}: " if self.source else ""
        if len(self.issues) == 1:
            return f"{head}{self.issues[0]}"
        lines = [f"{head}{len(self.issues)} problems"]
        lines += [f"  - {issue}" for issue in self.issues[:MAX_ISSUES]]
        if len(self.issues) > MAX_ISSUES:
            lines.append(f"  ... and {len(self.issues) - MAX_ISSUES} more")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.render()

    def with_prefix(self, prefix: str) -> ConfigError:
        return ConfigError([i.prefixed(prefix) for i in self.issues], self.source)

    def with_source(self, source: str) -> ConfigError:
        return ConfigError(self.issues, source)


def show(value: Any) -> str:
    """A short, YAML-like rendering of a user value for error messages."""
    if isinstance(value, str):
        return repr(value) if len(value) <= 200 else f"{value[:100]!r}... ({len(value):,} characters)"
    if isinstance(value, (list, tuple, dict, set)) and len(value) > 20:  # repr of a huge value is slow
        return f"a {type(value).__name__} of {len(value):,} items"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def did_you_mean(value: Any, names: list[str]) -> str:
    """` (did you mean 'x'?)` for a short string close to one of `names`, else ''."""
    if not isinstance(value, str) or len(value) > 100:
        return ""
    close = difflib.get_close_matches(value, names, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def describe_range(low: float | None, high: float | None) -> str:
    """`2..1,048,576`, `>= 0` or `<= 64`, for messages."""

    def fmt(x: float) -> str:
        if isinstance(x, int) and x >= 2**31 and (x + 1) & x == 0:
            return f"2**{(x + 1).bit_length() - 1}-1"
        if isinstance(x, int) and x <= -(2**31) and (-x) & (-x - 1) == 0:
            return f"-2**{(-x).bit_length() - 1}"
        if isinstance(x, int):
            return f"{x:,}" if abs(x) >= 10_000 else str(x)
        return f"{x:g}"

    if low is not None and high is not None:
        return f"{fmt(low)}..{fmt(high)}"
    if low is not None:
        return f">= {fmt(low)}"
    assert high is not None, "a range has at least one bound"
    return f"<= {fmt(high)}"
