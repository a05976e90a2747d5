"""Live progress of a sweep on the driver's console: the trials done against the true total (the
expanded plan's), the running and failed ones, the elapsed time, an ETA, and each running
trial's step of its total.

`SweepProgress` is the board; Ray Tune's events feed it (`orchestrator.ray.tune.Progress`). It
imports no Ray, so it is tested without a cluster. Its status reads
`[7/12 done · 2 running · 0 failed · 4m12s · ETA ~2m]`.

The ETA. A trial's work is its tokens (steps x tokens per step, from its config). The board
learns one rate, wall seconds per token in one trial slot, from the finished trials: their tokens
over their wall time from start to end (start-up, evaluations and final benchmarks included, so
a busy machine's slowness is in it); before any trial has finished, from the running trials'
reported steps. The remaining work (the running trials' rest, each at least what its own pace
says, and every pending trial) is laid out on the `concurrency` slots, each pending trial on the
slot that frees first; the ETA is when the last slot frees. There is no ETA before the first
report. A trial the scheduler (ASHA) stops ends early, so such a sweep ends sooner than its ETA.

Output (`BarDisplay`, `PlainDisplay`): on a terminal a tqdm bar at the bottom with the event
lines above it; elsewhere (logs, CI, pipes, the tests) plain lines, one per event with the status
in front, and while nothing else is said, a status line with the running trials' steps every
`every_s` seconds (30).
"""

from __future__ import annotations

import heapq
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from orchestrator.ray.payload import TrialPayload

EVERY_S = 30.0
"""Seconds between two plain status lines while no event is printed."""


@dataclass
class Work:
    """What one trial has to do."""

    name: str
    steps: int
    tokens_per_step: int
    key: str | None = None
    """The config hash of a grid trial (None for an Optuna sample: it takes an entry of its arm)."""
    arm: str = ""
    """The grid arm the trial belongs to (its payload's name)."""

    @property
    def tokens(self) -> int:
        return max(1, self.steps) * max(1, self.tokens_per_step)


def work_of(payload: TrialPayload, sampled: dict[str, Any] | None = None, *, key: str | None = None) -> Work:
    """The work of a trial payload, Optuna's `sampled` values (dotted paths) applied."""
    cfg = payload.config
    sampled = sampled or {}

    def value(path: str, default: int) -> int:
        if path in sampled:
            return int(sampled[path])
        node: Any = cfg
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        return int(node) if isinstance(node, (int, float)) and not isinstance(node, bool) else default

    per_step = value("train.batch_size", 1) * value("train.grad_accum", 1) * max(1, payload.workers) * value("data.seq_len", 1)
    return Work(payload.name, value("train.steps", 1), per_step, key=key, arm=payload.name)


def duration(s: float) -> str:
    """`12s`, `4m12s`, `1h03m`."""
    s = max(0, int(round(s)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def eta_text(s: float | None) -> str:
    """`<1m`, `~2m`, `~1h05m`; `?` when there is no estimate yet."""
    if s is None:
        return "?"
    if s < 60:
        return "<1m"
    m = round(s / 60)
    return f"~{m}m" if m < 60 else f"~{m // 60}h{m % 60:02d}m"


@dataclass
class Running:
    work: Work
    started: float
    step: int = 0
    step_at: float = 0.0
    """When `step` was reported."""

    def pace_total(self) -> float | None:
        """The trial's own estimate of its wall time, from its last reported step."""
        if self.step <= 0 or self.step_at <= self.started:
            return None
        return (self.step_at - self.started) * self.work.steps / self.step


class SweepProgress:
    """The board: `start`, `report`, `end`, `retry` for Tune's events, `tick` in between."""

    def __init__(
        self,
        plan: list[Work],
        *,
        concurrency: int,
        display: Display,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.pending = list(plan)
        self.total = len(plan)
        self.concurrency = max(1, concurrency)
        self.display, self.clock = display, clock
        self.running: dict[str, Running] = {}
        self.done = self.failed = self.stopped = 0
        self.finished_tokens = 0.0
        self.finished_s = 0.0
        self.t0 = clock()
        self.display.open(self)

    # ---- events ----------------------------------------------------------------------------
    def start(self, tid: str, work: Work) -> None:
        """Trial `tid` started doing `work` (its own config's); it takes its plan entry."""
        entry = self._take(work)
        if tid in self.running and entry is not None:  # a restart Tune did not announce as a retry
            self.pending.insert(0, entry)
        self.running[tid] = Running(work, self.clock())
        self._say(f"start   {work.name}")

    def report(self, tid: str, step: int, text: str = "") -> None:
        """An intermediate (or final) result of trial `tid` at `step`."""
        run = self.running.get(tid)
        if run is not None and step > 0:
            run.step, run.step_at = step, self.clock()
        if text:
            total = f"/{run.work.steps}" if run is not None else ""
            name = run.work.name if run is not None else tid
            self._say(f"eval    {name}  step {step}{total}  {text}".rstrip())

    def end(self, tid: str, outcome: str, detail: str = "") -> None:
        """Trial `tid` ended: `done`, `stopped` (the scheduler ended it early) or `failed`."""
        run = self.running.pop(tid, None)
        now = self.clock()
        if outcome == "failed":
            self.failed += 1
        else:
            self.done += 1
            self.stopped += outcome == "stopped"
            if run is not None:
                trained = run.work.tokens if outcome == "done" else max(run.step, 1) * run.work.tokens_per_step
                self.finished_tokens += trained
                self.finished_s += max(now - run.started, 1e-6)
        if run is None:
            self._take(Work("?", 1, 1))  # ended without a start event: its entry is used up
        name = run.work.name if run is not None else tid
        label = {"done": "done", "stopped": "stopped", "failed": "failed"}.get(outcome, outcome)
        self._say(f"{label:<7} {name}" + (f": {detail}" if detail else ""))

    def retry(self, tid: str, detail: str = "") -> None:
        """Tune retries trial `tid` (its worker died): it is pending again."""
        run = self.running.pop(tid, None)
        if run is not None:
            self.pending.insert(0, run.work)
        self._say(f"retry   {run.work.name if run else tid}" + (f": {detail}" if detail else ""))

    def skip(self, keys: set[str]) -> None:
        """Planned trials that will not run (a ladder's arms not promoted to the next rung) leave the
        plan: the total and the ETA count only what is still to come."""
        kept = [w for w in self.pending if w.key is None or w.key not in keys]
        self.total -= len(self.pending) - len(kept)
        self.pending = kept

    def say(self, line: str) -> None:
        """A line of the launcher's own (with the status in front)."""
        self._say(line)

    def tick(self) -> None:
        """Between events (Tune's loop calls it often): the display refreshes when it is due."""
        self.display.tick(self)

    def close(self) -> None:
        self.display.close(self)

    # ---- what the display shows ---------------------------------------------------------------
    def elapsed(self) -> float:
        return self.clock() - self.t0

    def rate(self) -> float | None:
        """Wall seconds per token in one trial slot: the finished trials', else the running ones'."""
        if self.finished_tokens > 0:
            return self.finished_s / self.finished_tokens
        tokens = sum(r.step * r.work.tokens_per_step for r in self.running.values() if r.pace_total() is not None)
        seconds = sum(r.step_at - r.started for r in self.running.values() if r.pace_total() is not None)
        return seconds / tokens if tokens > 0 else None

    def eta(self) -> float | None:
        """Seconds until the last trial ends (None before anything was measured)."""
        spt = self.rate()
        if spt is None:
            return None if self.running or self.pending else 0.0
        now = self.clock()
        slots = []
        for r in self.running.values():
            total = max(r.work.tokens * spt, r.pace_total() or 0.0)
            slots.append(max(0.0, total - (now - r.started)))
        slots += [0.0] * max(0, self.concurrency - len(slots))
        heapq.heapify(slots)
        for w in self.pending:
            heapq.heappush(slots, heapq.heappop(slots) + w.tokens * spt)
        return max(slots) if slots else 0.0

    def status(self) -> str:
        """`[7/12 done · 2 running · 0 failed · 4m12s · ETA ~2m]`."""
        parts = [f"{self.done}/{self.total} done", f"{len(self.running)} running", f"{self.failed} failed"]
        if self.stopped:
            parts.append(f"{self.stopped} stopped early")
        parts.append(duration(self.elapsed()))
        if self.done + self.failed < self.total:
            parts.append(f"ETA {eta_text(self.eta())}")
        return "[" + " · ".join(parts) + "]"

    def steps_text(self) -> str:
        """`none-s0 500/1500, G1-elementwise-s1 0/1500`: each running trial's step of its total."""
        return ", ".join(f"{r.work.name} {r.step}/{r.work.steps}" for r in self.running.values())

    # ---- internals -------------------------------------------------------------------------
    def _take(self, work: Work) -> Work | None:
        for match in (
            lambda w: work.key is not None and w.key == work.key,
            lambda w: bool(work.arm) and w.arm == work.arm,
            lambda w: True,
        ):
            for i, w in enumerate(self.pending):
                if match(w):
                    return self.pending.pop(i)
        return None

    def _say(self, line: str) -> None:
        self.display.event(self, line)


def wants_bar(stream: TextIO | None = None) -> bool:
    """A bar on a terminal that says its size; plain lines anywhere else (logs, CI, pipes)."""
    import shutil

    stream = stream or sys.stdout
    return bool(getattr(stream, "isatty", lambda: False)()) and shutil.get_terminal_size((0, 0)).columns > 0


class Display:
    """Where the board's lines go."""

    def open(self, board: SweepProgress) -> None:
        pass

    def event(self, board: SweepProgress, line: str) -> None:
        raise NotImplementedError

    def tick(self, board: SweepProgress) -> None:
        pass

    def close(self, board: SweepProgress) -> None:
        pass


class PlainDisplay(Display):
    """Plain lines (logs, CI, pipes): `[status] line`; every `every_s` seconds without an event,
    `[status] running: name step/steps, ...`."""

    def __init__(self, write: Callable[[str], None] = print, every_s: float = EVERY_S):
        self.write, self.every_s = write, every_s
        self.last = 0.0

    def open(self, board: SweepProgress) -> None:
        self.last = board.clock()

    def event(self, board: SweepProgress, line: str) -> None:
        self.write(f"{board.status()} {line}")
        self.last = board.clock()

    def tick(self, board: SweepProgress) -> None:
        if board.clock() - self.last >= self.every_s and board.running:
            self.write(f"{board.status()} running: {board.steps_text()}")
            self.last = board.clock()

    def close(self, board: SweepProgress) -> None:
        self.write(board.status())


BAR_WIDTH = 24
"""Characters of the bar itself (it shrinks to 10 on a narrow terminal)."""


def fit_line(status: str, entries: list[str], room: int) -> str:
    """`status | a 500/1500, b 0/1500` in at most `room` characters: the running trials' entries
    whole, as many as fit, then `+k more`; never a name cut in the middle."""
    if len(status) >= room:
        return status[: max(0, room - 1)] + "…" if room > 0 else ""
    shown: list[str] = []
    for i, entry in enumerate(entries):
        rest = len(entries) - i - 1
        more = f", +{rest} more" if rest else ""
        line = f"{status} | {', '.join([*shown, entry])}{more}"
        if len(line) > room:
            hidden = len(entries) - len(shown)
            tail = f"+{hidden} running" if not shown else f"+{hidden} more"
            candidate = f"{status} | {', '.join(shown)}{', ' if shown else ''}{tail}"
            return candidate if len(candidate) <= room else status
        shown.append(entry)
    return f"{status} | {', '.join(shown)}" if shown else status


class BarDisplay(Display):
    """A tqdm bar at the bottom of a terminal (done and failed trials of the total, the rest of
    the status and the running trials' steps after it), event lines printed above it. The bar's
    line fits the terminal's width (`columns`, asked at every refresh): the running trials are
    listed whole, as many as fit (`fit_line`)."""

    def __init__(self, file: TextIO | None = None, refresh_s: float = 1.0, columns: Callable[[], int] | None = None):
        import shutil

        self.file = file or sys.stdout
        self.refresh_s = refresh_s
        self.columns = columns or (lambda: shutil.get_terminal_size((100, 24)).columns)
        self.bar: Any = None
        self.last = 0.0

    def open(self, board: SweepProgress) -> None:
        from tqdm import tqdm

        self.bar = tqdm(
            total=board.total,
            file=self.file,
            ncols=self.columns(),
            leave=True,
            unit="trial",
            bar_format=f"{{n_fmt}}/{{total_fmt}} done |{{bar:{BAR_WIDTH}}}| {{desc}}",
        )
        self._update(board)

    def _update(self, board: SweepProgress) -> None:
        self.bar.n = board.done + board.failed
        width = max(20, self.columns())
        self.bar.ncols = width
        narrow = width < 80
        self.bar.bar_format = f"{{n_fmt}}/{{total_fmt}} done |{{bar:{10 if narrow else BAR_WIDTH}}}| {{desc}}"
        fixed = len(f"{board.total}/{board.total} done |") + (10 if narrow else BAR_WIDTH) + 2
        text = board.status()[1:-1].split(" · ", 1)[-1]  # the count is the bar's own
        entries = [e for e in board.steps_text().split(", ") if e]
        self.bar.set_description_str(fit_line(text, entries, width - fixed - 1), refresh=False)
        self.bar.refresh()
        self.last = board.clock()

    def event(self, board: SweepProgress, line: str) -> None:
        self.bar.write(f"  {line}", file=self.file)
        self._update(board)

    def tick(self, board: SweepProgress) -> None:
        if board.clock() - self.last >= self.refresh_s:
            self._update(board)

    def close(self, board: SweepProgress) -> None:
        if self.bar is not None:
            self._update(board)
            self.bar.close()
            self.bar = None
