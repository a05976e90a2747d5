"""The `gatesweep` command: one module per subcommand."""

from .main import main

__all__ = ["main"]
