"""The managed-service base of tests/services: one server process started in its own process
group, awaited until it answers, paused, resumed and stopped by its pid (never by name)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from tests.support.wait import wait_until


class ManagedProcess:
    """A subclass names its `command()`, its `ready()` probe, its `log_path`, and optionally
    `environment()` (None: this process's own); `launch()` starts it and waits; `terminate()` stops
    its whole process group, SIGKILL after a grace period."""

    name = "service"
    proc: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        raise NotImplementedError

    def command(self) -> list[str]:
        raise NotImplementedError

    def environment(self) -> dict[str, str] | None:
        return None

    def ready(self) -> bool:
        raise NotImplementedError

    def launch(self, timeout: float, *, interval: float = 0.2) -> None:
        """Start the process (output appended to `log_path`) and wait until `ready()`; a process
        that exits or never answers is stopped and reported with its log's tail."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                self.command(),
                env=self.environment(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        proc = self.proc
        try:
            wait_until(lambda: proc.poll() is not None or self.ready(), timeout, f"{self.name} to answer", interval=interval)
        except AssertionError:
            pass
        if proc.poll() is None and self.ready():
            return
        tail = self.log_path.read_text(errors="replace")[-2000:]
        self.stop()
        raise RuntimeError(f"{self.name} did not start: {tail}")

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal_group(self, sig: signal.Signals) -> None:
        assert self.proc is not None, f"{self.name} was never started"
        os.killpg(self.proc.pid, sig)

    def pause(self) -> None:
        """SIGSTOP: unresponsive without losing anything, as a store that hangs looks to a client."""
        self.signal_group(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal_group(signal.SIGCONT)

    def terminate(self, grace: float) -> None:
        """SIGCONT (a paused one can exit) and SIGTERM to the process group, SIGKILL after `grace` s."""
        if not self.running():
            return
        self.signal_group(signal.SIGCONT)
        self.signal_group(signal.SIGTERM)
        self.reap(grace)

    def reap(self, grace: float) -> None:
        """Wait `grace` s for the process to exit, then SIGKILL its process group and wait."""
        assert self.proc is not None
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        self.terminate(10)
