"""The one error of the interop package: a user's mistake or an unsupported model, one line."""

from __future__ import annotations

from orchestrator.core.errors import UserError


class InteropError(UserError):
    """A folder, file, layout or variant that cannot be exported or imported. A `UserError`, so
    the CLI prints it as one line and exits 2."""
