"""The time estimate of `gatesweep plan --measure`: a sum of named parts, each measured on this
machine when the plan is made, so that a busy machine's slowness is in every one of them.

Measured at plan time (`measure`):

- **a start-up probe** P: the wall seconds a fresh Python takes to import what a trial imports
  (torch, DeepSpeed, MLflow, the trainer); start-up costs grow with it;
- **a few training steps** of each distinct model (a plain torch loop on the trial's model, batch
  and thread count: `measure_step`), their spread (10th to 90th percentile) the estimate's range.

Not modelled: Ray runs its workers at niceness 15 (`RAY_worker_niceness`), so beside other work on
the machine a trial gets less of a core than the step measured here at the driver's priority, and
the load a run will meet is not the load at plan time. Measuring the steps at that niceness was
tried and dropped: a short niced sample beside a load average of 30 was 10 times too slow.

The parts (`TimeEstimate.parts`, in order; each a `Part`, so a part can be added or replaced
without touching the others; an evaluation-time estimate of the final benchmarks is one):

| part | how it is counted |
|---|---|
| start | the driver's Python, a local Ray and the store: `START_S` + `START_P` x P |
| trial start-up | each trial slot's first trial starts a Ray worker that imports the trainer (`WORKER_S` + `WORKER_P` x P); every trial opens its run, builds its engine and writes its artifacts (`TRIAL_S`) |
| training | steps x the measured step x `TRAINER_FACTOR` (the DeepSpeed engine, logging, the data loader around the same step) x the contention of the trials running at once |
| evaluations | each trial's evaluations (`train.eval_every`, and the last): eval batches and the probe pass as fractions of a training step |
| waiting | the trials laid out on the slots, longest first: the time the last slot runs after the others are done |
| report | the end of a sweep: Ray stopped, the runs closed, the report (statistics, plots, HTML): `REPORT_S` + `REPORT_RUN_S` per trial, and a ladder's fits `LADDER_REPORT_P` x P |

The constants were fitted on a 2-core machine shared with other work (benchmarks/plan_accuracy.py
gives the estimate's error against measured sweeps; docs/performance.md). Contention: the step
was measured with the machine's load beside it; `n` trials at once add their threads to that load,
so each gets `min(1, cores / (load + threads))` of a core where the measurement got
`min(1, cores / (load + 1))`.
"""

from __future__ import annotations

import heapq
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

START_S, START_P = 10.0, 2.5
"""The driver's start (Python, a local Ray, the store, the parent and child runs): seconds + x P."""
WORKER_S, WORKER_P = 6.0, 1.65
"""A Ray worker's start (its first trial's imports): seconds + x P."""
TRIAL_S = 3.0
"""Each trial's own fixed cost (its run, its engine, its final probes and artifacts), seconds."""
REPORT_S, REPORT_RUN_S = 14.0, 0.4
"""The end of a sweep (Ray stopped, the parent closed, the report built, the tables printed):
seconds + seconds per trial. It waits on Ray's shutdown more than it computes, so it is not
scaled by the probe (14-22 s measured for 4-20 trials at load averages 4-50 on 2 cores)."""
LADDER_REPORT_P = 2.7
"""A ladder's fits and bootstrap intervals in the report, x P (45 s measured at P = 16.6 s)."""
TRAINER_FACTOR = 1.2
"""A trial's step over the plain torch step of the same model and batch (DeepSpeed's engine,
the loss and gradient bookkeeping, logging every `log_every` steps): 1.16-1.24 measured on
`bigram-1l` (benchmarks/plan_accuracy.py); it falls towards 1 as the model grows."""
PROBE_PASS_FACTOR = 3.0
"""The probe pass (attention weights made explicit, activations hooked) over a plain forward."""
PROBE_IMPORTS = "import orchestrator.trial.run, deepspeed"


@dataclass
class Part:
    """One named part of the estimate: wall seconds, with the range its measurements allow."""

    name: str
    seconds: float
    low: float
    high: float
    how: str


@dataclass
class TimeEstimate:
    """The sum of named parts; `notes` say what is not counted."""

    parts: list[Part] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return sum(p.seconds for p in self.parts)

    @property
    def low(self) -> float:
        return sum(p.low for p in self.parts)

    @property
    def high(self) -> float:
        return sum(p.high for p in self.parts)


def measure_step(cfg, *, threads: int = 1, budget_s: float = 1.0, min_steps: int = 5, max_steps: int = 30) -> list[float]:
    """Seconds of each optimizer step of a plain torch loop on this trial's model and batch, with
    the trial's thread count: steps after a warm-up one until `budget_s` is spent (at least
    `min_steps`, at most `max_steps`), so a busy machine's spread shows."""
    import torch  # lazy: torch itself
    import torch.nn.functional as F  # lazy: torch itself

    from gatedmodels import GatedTransformer  # lazy: imports torch

    before = torch.get_num_threads()
    torch.set_num_threads(max(1, threads))
    try:
        torch.manual_seed(0)
        model = GatedTransformer(cfg.model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        x = torch.randint(0, cfg.model.vocab_size, (cfg.train.batch_size, cfg.data.seq_len + 1))
        times: list[float] = []
        start = time.perf_counter()
        while len(times) < max_steps + 1 and (len(times) < min_steps + 1 or time.perf_counter() - start < budget_s):
            t0 = time.perf_counter()
            for _ in range(cfg.train.grad_accum):
                loss = F.cross_entropy(model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten())
                loss.backward()
            opt.step()
            opt.zero_grad()
            times.append(time.perf_counter() - t0)
        return times[1:]  # the first step allocates
    finally:
        torch.set_num_threads(before)


def start_probe(runs: int = 1) -> float:
    """P: the fewest wall seconds, over `runs` fresh Pythons, to import what a trial imports."""
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", PROBE_IMPORTS], check=False, capture_output=True, env=os.environ.copy())
        best = min(best, time.perf_counter() - t0)
    return best


@dataclass
class Measured:
    """What `measure` timed: the start-up probe and each distinct model's step times."""

    probe: float
    """P: a fresh Python importing the trainer."""
    steps: dict[str, list[float]]
    """Model key -> its step times."""


def measure(configs: dict[str, Any], threads: int) -> Measured:
    """The start-up probe and a few steps of each distinct model (`configs`: key -> trial config)."""
    return Measured(start_probe(), {key: measure_step(cfg, threads=threads) for key, cfg in configs.items()})


def quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def machine_load() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return 0.0


def contention(cores: int, load: float, threads_at_once: float) -> float:
    """How much slower a step runs beside `threads_at_once` trial threads than when it was
    measured alone beside the machine's `load`."""
    alone = min(1.0, cores / (load + 1.0))
    together = min(1.0, cores / (load + max(1.0, threads_at_once)))
    return alone / together


def evaluations(cfg) -> int:
    """The evaluations a trial runs: one every `train.eval_every` steps, and the last."""
    tr = cfg.train
    every = tr.eval_every if 0 < tr.eval_every < tr.steps else tr.steps
    return max(1, tr.steps // every) + (0 if tr.steps % every == 0 else 1)


def evaluation_steps(cfg) -> float:
    """One evaluation in training steps: its forward passes (a third of a step's FLOPs per token)
    and the probe pass, over a training step's tokens."""
    ev, tr, seq = cfg.eval, cfg.train, cfg.data.seq_len
    step_tokens = tr.batch_size * tr.grad_accum * seq
    tokens = ev.batches * ev.batch_size * seq + PROBE_PASS_FACTOR * ev.probe_sequences * seq
    return tokens / (3.0 * step_tokens)


@dataclass
class TrialTime:
    """One trial's seconds: its fixed cost, its training (median, 10th and 90th percentile of
    the step) and its evaluations."""

    fixed: float
    train: float
    train_low: float
    train_high: float
    evals: float

    def total(self, which: str = "mid") -> float:
        train = {"mid": self.train, "low": self.train_low, "high": self.train_high}[which]
        return self.fixed + train + self.evals


def makespan(trials: list[TrialTime], slots: int, first: float, which: str = "mid") -> float:
    """When the last slot frees: the trials longest first, each on the slot that frees first;
    a slot's first trial also pays `first` (its worker's start)."""
    heap = [0.0] * max(1, slots)
    fresh = [True] * len(heap)
    order = sorted(trials, key=lambda t: t.total(which), reverse=True)
    ends: list[tuple[float, int]] = [(0.0, i) for i in range(len(heap))]
    heapq.heapify(ends)
    for t in order:
        end, i = heapq.heappop(ends)
        cost = t.total(which) + (first if fresh[i] else 0.0)
        fresh[i] = False
        heapq.heappush(ends, (end + cost, i))
    return max(e for e, _ in ends) if order else 0.0


def estimate(trials: list[TrialTime], *, slots: int, measured: Measured, ladder: bool = False) -> TimeEstimate:
    """The named parts of a sweep's wall time (`trials`: the trials to run, with contention applied)."""
    n = len(trials)
    used = min(slots, n) or 1
    worker = WORKER_S + WORKER_P * measured.probe
    start = START_S + START_P * measured.probe
    parts = [Part("start", start, start, start, f"Python, a local Ray and the store ({START_S:g} s + {START_P:g} P)")]
    startup = (used * worker + sum(t.fixed for t in trials)) / used
    parts.append(
        Part(
            "trial start-up", startup, startup, startup, f"a worker per slot ({WORKER_S:g} s + {WORKER_P:g} P) and {TRIAL_S:g} s per trial"
        )
    )
    train = [sum(getattr(t, k) for t in trials) / used for k in ("train", "train_low", "train_high")]
    parts.append(Part("training", *train, "steps x the measured step, its spread the 10th-90th percentile"))
    evals = sum(t.evals for t in trials) / used
    parts.append(Part("evaluations", evals, evals, evals, "eval batches and the probe pass, as fractions of a step"))
    spans = {w: makespan(trials, used, worker, w) for w in ("mid", "low", "high")}
    busy = {w: sum(p.seconds if w == "mid" else (p.low if w == "low" else p.high) for p in parts[1:]) for w in spans}
    wait = {w: max(0.0, spans[w] - busy[w]) for w in spans}
    parts.append(Part("waiting", wait["mid"], wait["low"], wait["high"], "the last slot's trials after the other slots are done"))
    report = REPORT_S + REPORT_RUN_S * n + (LADDER_REPORT_P * measured.probe if ladder else 0.0)
    fits = f" + {LADDER_REPORT_P:g} P for the ladder's fits" if ladder else ""
    parts.append(
        Part(
            "report",
            report,
            report,
            report,
            f"the end: runs closed, the report built ({REPORT_S:g} s + {REPORT_RUN_S:g} s per trial{fits})",
        )
    )
    return TimeEstimate(parts)


def trial_time(cfg, step_times: list[float], *, slow: float) -> TrialTime:
    """One trial's `TrialTime` from its model's measured steps, `slow` the contention factor."""
    k = TRAINER_FACTOR * slow
    steps = cfg.train.steps
    mid = quantile(step_times, 0.5)
    return TrialTime(
        fixed=TRIAL_S,
        train=mid * steps * k,
        train_low=quantile(step_times, 0.1) * steps * k,
        train_high=quantile(step_times, 0.9) * steps * k,
        evals=evaluations(cfg) * evaluation_steps(cfg) * mid * k,
    )


def lines(est: TimeEstimate, duration) -> list[str]:
    """The estimate as plan prints it: the total and its range, then each part."""
    out = [
        f"estimated wall time: {duration(est.seconds)} ({duration(est.low)} to {duration(est.high)} over the step times' "
        "10th to 90th percentile), the sum of:"
    ]
    width = max(len(p.name) for p in est.parts)
    for p in est.parts:
        out.append(f"  {p.name.ljust(width)}  {duration(p.seconds):>8}  {p.how}")
    return out + [f"not counted: {note}" for note in est.notes]


def duration_text(s: float) -> str:
    """Seconds as the plan prints them: "42 s", "3.5 min", "2.1 h"."""
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"
