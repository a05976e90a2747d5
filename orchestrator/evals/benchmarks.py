"""The end-of-trial benchmarks, one registered kind each (`BENCHMARK_KINDS`): the held-out
evaluation at longer lengths (`length`), lm-evaluation-harness tasks (`tasks`), the RULER-style
suite (`ruler`) and held-out perplexity sets (`ppl`). Each kind is a function (Bench) -> metrics
to log, run by `orchestrator.evals.suite.run_benchmarks` in registry order when its name is in
`which` (and, for a kind that needs text, when the trial has a tokenizer).

Adding a benchmark: its settings in `orchestrator/spec/evaluation.py`, its scorer in
`orchestrator/evals/`, one function here with one `Benchmark` entry in `BENCHMARK_KINDS`, and its
metrics as a prefix entry in `orchestrator/core/metrics.py`."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from gatedmodels import RopeConfig, rope_override

from ..data.text import heldout_windows
from .evalcache import cached, weights_hash
from .harness import run_tasks  # lm-evaluation-harness itself loads only when tasks run (harness imports it lazily)
from .heldout import perplexity
from .length import extended_rope, length_metrics
from .ruler import min_length, run_ruler

HARNESS_VERSION = "lm-eval-0.4.13"


@dataclass
class Bench:
    """What a benchmark reads: the model in eval mode, its tokenizer (None on synthetic data), the
    trial's config (`trial_cfg.eval` holds the benchmarks' settings), the device, progress lines."""

    model: Any
    tokenizer: Any
    trial_cfg: Any
    device: Any
    progress: Callable[[str], None] | None = None

    def say(self, line: str) -> None:
        if self.progress is not None:
            self.progress(line)

    @cached_property
    def weights(self) -> str:
        """The key of the cached results: a hash of the weights (computed once, when a benchmark needs it)."""
        return weights_hash(self.model)

    @cached_property
    def tok_id(self) -> str:
        return self.tokenizer.fingerprint()


@dataclass(frozen=True)
class Benchmark:
    """One kind of benchmark."""

    run: Callable[[Bench], dict[str, float]]
    """(Bench) -> the metrics to log ({} when its settings ask for nothing)."""
    text: bool = True
    """Needs a tokenizer: skipped on synthetic data (the config refuses it there)."""


def run_length(b: Bench) -> dict[str, float]:
    """The held-out loss at longer lengths (`eval.length`)."""
    if not b.trial_cfg.eval.length.lengths:
        return {}
    return length_metrics(b.model, b.trial_cfg, device=b.device, progress=b.progress)


def run_harness(b: Bench) -> dict[str, float]:
    """lm-evaluation-harness tasks (`eval.tasks`), cached per weights, tokenizer and settings."""
    t = b.trial_cfg.eval.tasks
    if not t.names:
        return {}

    def do_tasks() -> dict[str, float]:
        return run_tasks(
            b.model, b.tokenizer, list(t.names), limit=t.limit, num_fewshot=t.num_fewshot, max_len=t.max_len,
            batch_size=t.batch_size, batch_tokens=t.batch_tokens, data_root=t.data, paths=dict(t.paths), progress=b.progress,
        )  # fmt: skip

    res, hit = cached({"kind": "harness", "version": HARNESS_VERSION, "weights": b.weights, "tok": b.tok_id, "cfg": t.to_dict()}, do_tasks)
    if hit:
        b.say(f"harness tasks {', '.join(t.names)}: cached")
    return res


def run_ruler_suite(b: Bench) -> dict[str, float]:
    """The RULER-style suite (`eval.ruler`) at each length whose prompts fit, cached per length."""
    r_cfg, tokenizer, train_len = b.trial_cfg.eval.ruler, b.tokenizer, b.trial_cfg.data.seq_len
    out: dict[str, float] = {}
    t_all = 0.0
    for length in r_cfg.lengths:
        rope = ruler_rope(r_cfg, length, train_len, b.trial_cfg.model.rope)
        tasks = [t for t in r_cfg.tasks if ruler_min_length(t, tokenizer) <= length]
        skipped = [t for t in r_cfg.tasks if t not in tasks]
        if skipped:
            b.say(
                f"RULER-style @ {length} tokens: {', '.join(skipped)} need longer contexts with tokenizer "
                f"{tokenizer.name} ({', '.join(str(ruler_min_length(t, tokenizer)) for t in skipped)} tokens); skipped"
            )
        if not tasks:
            continue

        def do_ruler(length=length, rope=rope, tasks=tasks) -> dict[str, float]:
            t0 = time.perf_counter()
            with rope_override(b.model, rope):
                r = run_ruler(
                    b.model, tokenizer, tasks=tasks, lengths=[length], n=r_cfg.samples, seed=r_cfg.seed, batch_size=r_cfg.batch_size
                )
            res = {f"ruler/{task}/{L}": score for (task, L), score in r.scores.items()}
            res.update({f"ruler_avg/{L}": avg for L, avg in r.per_length.items()})
            res["eval_time_s/ruler"] = time.perf_counter() - t0
            return res

        settings = {k: v for k, v in r_cfg.to_dict().items() if k not in ("lengths", "tasks")}
        key = {
            "kind": "ruler",
            "weights": b.weights,
            "tok": b.tok_id,
            "length": length,
            "rope": rope.to_dict(),
            "tasks": tasks,
            "cfg": settings,
        }
        res, hit = cached(key, do_ruler)
        t_all += res.pop("eval_time_s/ruler")
        out.update(res)
        b.say(
            f"RULER-style @ {length} tokens ({len(tasks)} tasks): average {res[f'ruler_avg/{length}']:.1f}" + (" (cached)" if hit else "")
        )
    out["eval_time_s/ruler"] = t_all
    return out


def run_ppl(b: Bench) -> dict[str, float]:
    """Perplexity and bits per byte on each held-out set (`eval.ppl_sets`), cached per set."""
    ev, cfg, tokenizer = b.trial_cfg.eval, b.trial_cfg, b.tokenizer
    if not ev.ppl_sets:
        return {}
    train_len = cfg.data.seq_len
    out: dict[str, float] = {}
    t_all = 0.0
    for name in ev.ppl_sets:

        def do_ppl(name=name) -> dict[str, float]:
            t0 = time.perf_counter()
            windows = heldout_windows(name, tokenizer, train_len, cfg.data.val_fraction)
            windows = windows[: ev.ppl_windows] if ev.ppl_windows else windows
            batches = (windows[i : i + ev.batch_size] for i in range(0, len(windows), ev.batch_size))
            p = perplexity(b.model, batches, tokenizer.token_bytes, device=b.device)
            return {f"ppl/{_set_name(name)}": p.ppl, f"bpb/{_set_name(name)}": p.bpb, "eval_time_s/ppl": time.perf_counter() - t0}

        key = {
            "kind": "ppl",
            "weights": b.weights,
            "tok": b.tok_id,
            "set": name,
            "seq_len": train_len,
            "val_fraction": cfg.data.val_fraction,
            **({"windows": ev.ppl_windows} if ev.ppl_windows else {}),  # the whole split keeps its old cache key
        }
        res, _ = cached(key, do_ppl)
        t_all += res.pop("eval_time_s/ppl", 0.0)  # the time of the evaluation itself, also on a cache hit
        out.update(res)
    out["eval_time_s/ppl"] = t_all
    b.say("perplexity: " + ", ".join(f"{k} {v:.3f}" for k, v in out.items() if k.startswith("ppl/")))
    return out


BENCHMARK_KINDS: dict[str, Benchmark] = {
    "length": Benchmark(run_length, text=False),
    "tasks": Benchmark(run_harness),
    "ruler": Benchmark(run_ruler_suite),
    "ppl": Benchmark(run_ppl),
}
"""Every benchmark kind by its name in `which` (`gatesweep eval --only`), in the order they run."""


def ruler_rope(cfg, length: int, train_len: int, rope: RopeConfig) -> RopeConfig:
    """RoPE for a RULER context of `length` tokens (`eval.ruler.extend`, `eval.ruler.base`)."""
    return extended_rope(cfg.extend, length, train_len, rope, cfg.base)


_MIN_LENGTH: dict[tuple[str, str], int] = {}


def ruler_min_length(task: str, tokenizer) -> int:
    """Shortest context at which RULER's prompt for `task` fits with this tokenizer."""
    key = (task, tokenizer.fingerprint())
    if key not in _MIN_LENGTH:
        _MIN_LENGTH[key] = min_length(task, tokenizer)
    return _MIN_LENGTH[key]


def _set_name(source: str) -> str:
    """A metric-key-safe name for a perplexity set (a corpus name, or a file's stem)."""
    return Path(source).stem if ("/" in source or "." in source) and not source.startswith("hf:") else source.replace(":", "_")
