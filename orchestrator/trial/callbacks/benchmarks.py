"""End-of-trial benchmarks: harness tasks, RULER-style, perplexity sets and the evaluation at longer
lengths (orchestrator.evals.suite), once,
on the final weights, in the main process; their metrics join the final ones."""

from __future__ import annotations

import time
from collections.abc import Callable

from orchestrator.evals import suite
from orchestrator.trial.callbacks.base import Callback


def selected(ev) -> tuple[str, ...]:
    """The benchmarks an EvalConfig turns on."""
    on = {"tasks": bool(ev.tasks.names), "ruler": ev.ruler.enabled, "ppl": bool(ev.ppl_sets), "length": bool(ev.length.lengths)}
    return tuple(name for name, wanted in on.items() if wanted)


class Benchmarks(Callback):
    def __init__(self, cfg, model, data, which: tuple[str, ...], *, device, progress: Callable[[str], None] | None = None):
        self.cfg, self.model, self.data, self.which, self.device, self.progress = cfg, model, data, which, device, progress

    def collect_final(self, metrics: dict) -> None:
        t0 = time.perf_counter()
        res = suite.run_benchmarks(
            self.model, getattr(self.data, "tokenizer", None), self.cfg, device=self.device, which=self.which, progress=self.progress
        )
        res["eval_time_s/benchmarks"] = time.perf_counter() - t0
        metrics.update(res)
