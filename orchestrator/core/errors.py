"""`UserError`, the one exception type for a user's mistake: the CLI prints it as one line and
exits with status 2 (no traceback). Every room raises it, or a subclass of it, for bad input."""

from __future__ import annotations


class UserError(Exception):
    """A mistake of the user's (bad file, bad flag): printed as one message, exit status 2."""
