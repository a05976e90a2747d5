"""Ray's and MLflow's own log lines (`INFO mlflow.store.db.utils: Creating initial MLflow
database tables`, `WARNING util.py:212 -- The process_trial_result operation took 0.941 s`) go to
the sweep's log file, RUNS/sweeps/NAME/sweep.log, instead of the console, where the progress
lines are.

`LibraryLog` is a context manager around a launch: while it is open, the console handlers of
the `ray`, `mlflow` and `alembic` loggers (and of every logger below them) are taken off and one
handler of its own takes their records; they wait in memory until the launcher knows the sweep's
folder (`attach`, after the checks that write nothing), then go to the file. A library configures
its logger when it is imported: MLflow is imported on entry, and since Ray must be imported after
its environment is set, the launcher calls `recapture()` after starting Ray. On exit every
logger gets its handlers back; records that never reached a file (the launch stopped before it
had a folder) go to stderr when they are warnings or worse.

A file that cannot be written (a full disk, a quota, a read-only folder) is said once, in one
line on stderr, and closed; from then on warnings and worse go to stderr and the rest is dropped.
No record ever reaches `logging`'s own error path (its "--- Logging error ---" traceback), and
closing the file at the end never raises.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import TextIO

LOGGERS = ("ray", "mlflow", "alembic")
LOG_FILE = "sweep.log"
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _Handler(logging.Handler):
    """Buffers records until a file is attached, then writes them there."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter(FORMAT))
        self.buffer: list[logging.LogRecord] = []
        self.file: TextIO | None = None
        self.path: Path | None = None
        self.failed = False
        """The file could not be written: warnings and worse go to stderr, the rest is dropped."""

    def emit(self, record: logging.LogRecord) -> None:
        if self.failed:
            if record.levelno >= logging.WARNING:
                print(self._text(record), file=sys.stderr)
            return
        if self.file is None:
            self.buffer.append(record)
            return
        try:
            self.file.write(self._text(record) + "\n")
            self.file.flush()
        except OSError as err:
            self.fail(err)
            if record.levelno >= logging.WARNING:
                print(self._text(record), file=sys.stderr)

    def _text(self, record: logging.LogRecord) -> str:
        try:
            return self.format(record)
        except Exception:  # a library's record whose arguments do not fit its message
            return f"{record.levelname} {record.name}: {record.msg!r}"

    def fail(self, err: OSError) -> None:
        """Say once that the file cannot be written, and stop writing to it."""
        if not self.failed:
            self.failed = True
            print(
                f"gatesweep: warning: {self.path}: Ray's and MLflow's log lines cannot be written ({err.strerror or err}); "
                "their warnings go to the console from here on",
                file=sys.stderr,
            )
        self.close_file()

    def close_file(self) -> None:
        if self.file is not None:
            file, self.file = self.file, None
            try:
                file.close()
            except OSError:
                pass  # what could not be flushed is lost; it was said

    def setFormatter(self, fmt: logging.Formatter | None) -> None:
        # Ray's ray.init() sets its format on every handler of its logger: this file keeps its own
        if self.formatter is None:
            super().setFormatter(fmt)


def _console(handler: logging.Handler) -> bool:
    return isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)


class LibraryLog:
    """See the module's docstring. One is active at a time (`LibraryLog.active`)."""

    active: LibraryLog | None = None

    def __init__(self, names: tuple[str, ...] = LOGGERS, preload: tuple[str, ...] = ("mlflow",)):
        self.names, self.preload = names, preload
        self.handler = _Handler()
        self.saved: dict[str, tuple[list[logging.Handler], bool]] = {}
        self.path: Path | None = None

    def __enter__(self) -> LibraryLog:
        import importlib

        for module in self.preload:  # its import configures its logger: before the capture, not after
            importlib.import_module(module)
        LibraryLog.active = self
        self.capture()
        return self

    def _loggers(self) -> list[logging.Logger]:
        found = [logging.getLogger(n) for n in self.names]
        for name, lg in list(logging.root.manager.loggerDict.items()):
            if isinstance(lg, logging.Logger) and any(name.startswith(n + ".") for n in self.names):
                found.append(lg)
        return found

    def capture(self) -> None:
        """Take the console handlers off the libraries' loggers (again: a library configures its
        loggers when it is imported)."""
        for lg in self._loggers():
            if lg.name not in self.saved:
                self.saved[lg.name] = (list(lg.handlers), lg.propagate)
            for h in [h for h in lg.handlers if _console(h)]:
                lg.removeHandler(h)
            if lg.name in self.names:
                if self.handler not in lg.handlers:
                    lg.addHandler(self.handler)
                lg.propagate = False

    def attach(self, folder: Path) -> Path:
        """Write the records to FOLDER/sweep.log from now on (those waiting first)."""
        if self.path is not None:
            return self.path
        self.path = self.handler.path = folder / LOG_FILE
        try:
            folder.mkdir(parents=True, exist_ok=True)
            self.handler.file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (closed on exit)
            self.handler.file.write(f"---- {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(sys.argv[1:])[:300]}\n")
            self.handler.file.flush()
        except OSError as err:
            self.handler.fail(err)
        for record in self.handler.buffer:
            self.handler.emit(record)
        self.handler.buffer.clear()
        return self.path

    def __exit__(self, *exc) -> None:
        for lg in self._loggers():
            if lg.name in self.saved:
                handlers, propagate = self.saved[lg.name]
                for h in list(lg.handlers):
                    lg.removeHandler(h)
                for h in handlers:
                    lg.addHandler(h)
                lg.propagate = propagate
            elif self.handler in lg.handlers:
                lg.removeHandler(self.handler)
        LibraryLog.active = None
        late = [r for r in self.handler.buffer if r.levelno >= logging.WARNING]
        for record in late:
            print(self.handler._text(record), file=sys.stderr)
        self.handler.buffer.clear()
        self.handler.close_file()


def attach(folder: Path) -> Path | None:
    """`LibraryLog.attach` on the active one (None when none is open)."""
    return LibraryLog.active.attach(folder) if LibraryLog.active is not None else None


def recapture() -> None:
    """`LibraryLog.capture` on the active one (after Ray was imported and started)."""
    if LibraryLog.active is not None:
        LibraryLog.active.capture()
