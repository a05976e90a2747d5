"""End-of-trial benchmarks: lm-evaluation-harness tasks (`harness`), the RULER-style suite and
held-out perplexity sets, and the held-out evaluation at longer lengths (`length`).

Results are cached per checkpoint: the key is a hash of the model weights and of the benchmark's
settings, so evaluating the same weights again (a resumed trial, `gatesweep eval` on a finished
run) costs nothing. Metric names (MLflow keys and report columns): `<task>/<metric>` and
`<task>/<metric>_stderr` as the harness names them (`hellaswag/acc_norm`, `mmlu/acc`,
`mmlu_stem/acc`, `gsm8k/exact_match/strict-match`), `ruler/<task>/<length>`, `ruler_avg/<length>`,
`ppl/<set>`, `bpb/<set>`, `length_loss/<extend>/<length>` (orchestrator.evals.length), and
`eval_time_s/<benchmark>`.
"""

from __future__ import annotations

from collections.abc import Callable

from .benchmarks import BENCHMARK_KINDS, HARNESS_VERSION, Bench, ruler_min_length, ruler_rope
from .evalcache import cached, weights_hash

BENCHMARKS = tuple(BENCHMARK_KINDS)
"""The benchmarks run by default: every kind of `orchestrator.evals.benchmarks.BENCHMARK_KINDS`, in its order."""


def run_benchmarks(
    model, tokenizer, trial_cfg, *, device, which: tuple[str, ...] = BENCHMARKS, progress: Callable[[str], None] | None = None
) -> dict[str, float]:
    """The benchmarks named in `which`, with the settings of `trial_cfg.eval`, in the order of
    BENCHMARK_KINDS (synthetic data, no tokenizer: only those that need no text); returns the metrics to log."""
    model.eval()
    bench = Bench(model, tokenizer, trial_cfg, device, progress)
    out: dict[str, float] = {}
    for name, kind in BENCHMARK_KINDS.items():
        if name in which and (tokenizer is not None or not kind.text):
            out.update(kind.run(bench))
    return out


__all__ = ["BENCHMARKS", "BENCHMARK_KINDS", "HARNESS_VERSION", "cached", "ruler_min_length", "ruler_rope", "run_benchmarks", "weights_hash"]
