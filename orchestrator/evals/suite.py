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

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path

import torch

from gatedmodels import RopeConfig, rope_override

from .. import storage
from .heldout import perplexity
from .length import extended_rope, length_metrics

BENCHMARKS = ("tasks", "ruler", "ppl", "length")
HARNESS_VERSION = "lm-eval-0.4.13"


def weights_hash(model: torch.nn.Module) -> str:
    """SHA-256 of the model's parameters and buffers (names, shapes, bytes)."""
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().to("cpu").contiguous()
        h.update(name.encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:24]


def _cache_file(key: str) -> Path:
    from ..data.tokenizers import cache_dir

    return cache_dir("evals") / f"{key}.json"


def cached(key_parts: dict, compute: Callable[[], dict[str, float]]) -> tuple[dict[str, float], bool]:
    """(metrics, hit): `compute()` once per key; later calls read the JSON cache."""
    key = hashlib.sha256(json.dumps(key_parts, sort_keys=True, default=str).encode()).hexdigest()[:32]
    path = _cache_file(key)
    if path.exists():
        try:
            return json.loads(path.read_text()), True
        except (OSError, json.JSONDecodeError):
            pass
    metrics = compute()
    storage.write_json(path, metrics)
    return metrics, False


def ruler_rope(cfg, length: int, train_len: int, rope: RopeConfig) -> RopeConfig:
    """RoPE for a RULER context of `length` tokens (`eval.ruler.extend`, `eval.ruler.base`)."""
    return extended_rope(cfg.extend, length, train_len, rope, cfg.base)


def run_benchmarks(
    model, tokenizer, trial_cfg, *, device, which: tuple[str, ...] = BENCHMARKS, progress: Callable[[str], None] | None = None
) -> dict[str, float]:
    """The benchmarks named in `which`, with the settings of `trial_cfg.eval`; returns the metrics to log."""
    ev = trial_cfg.eval
    model.eval()
    out: dict[str, float] = {}
    say = progress or (lambda line: None)
    train_len = trial_cfg.data.seq_len
    out.update(length_metrics(model, trial_cfg, device=device, progress=progress) if "length" in which and ev.length.lengths else {})
    if tokenizer is None:  # synthetic data: the other benchmarks need text (the config refuses them)
        return out
    wh = weights_hash(model)  # the key of the cached benchmarks below
    tok_id = tokenizer.fingerprint()

    if "tasks" in which and ev.tasks.names:
        from .harness import run_tasks

        t = ev.tasks

        def do_tasks() -> dict[str, float]:
            return run_tasks(
                model,
                tokenizer,
                list(t.names),
                limit=t.limit,
                num_fewshot=t.num_fewshot,
                max_len=t.max_len,
                batch_size=t.batch_size,
                batch_tokens=t.batch_tokens,
                data_root=t.data,
                paths=dict(t.paths),
                progress=progress,
            )

        res, hit = cached({"kind": "harness", "version": HARNESS_VERSION, "weights": wh, "tok": tok_id, "cfg": t.to_dict()}, do_tasks)
        out.update(res)
        if hit:
            say(f"harness tasks {', '.join(t.names)}: cached")

    if "ruler" in which:
        from .ruler import run_ruler

        r_cfg = ev.ruler
        t_all = 0.0
        for length in r_cfg.lengths:
            rope = ruler_rope(r_cfg, length, train_len, trial_cfg.model.rope)
            tasks = [t for t in r_cfg.tasks if ruler_min_length(t, tokenizer) <= length]
            skipped = [t for t in r_cfg.tasks if t not in tasks]
            if skipped:
                say(
                    f"RULER-style @ {length} tokens: {', '.join(skipped)} need longer contexts with tokenizer "
                    f"{tokenizer.name} ({', '.join(str(ruler_min_length(t, tokenizer)) for t in skipped)} tokens); skipped"
                )
            if not tasks:
                continue

            def do_ruler(length=length, rope=rope, tasks=tasks) -> dict[str, float]:
                t0 = time.perf_counter()
                with rope_override(model, rope):
                    r = run_ruler(
                        model, tokenizer, tasks=tasks, lengths=[length], n=r_cfg.samples, seed=r_cfg.seed, batch_size=r_cfg.batch_size
                    )
                res = {f"ruler/{task}/{L}": score for (task, L), score in r.scores.items()}
                res.update({f"ruler_avg/{L}": avg for L, avg in r.per_length.items()})
                res["eval_time_s/ruler"] = time.perf_counter() - t0
                return res

            key = {
                "kind": "ruler",
                "weights": wh,
                "tok": tok_id,
                "length": length,
                "rope": rope.to_dict(),
                "tasks": tasks,
                "cfg": {k: v for k, v in r_cfg.to_dict().items() if k not in ("lengths", "tasks")},
            }
            res, hit = cached(key, do_ruler)
            t_all += res.pop("eval_time_s/ruler")
            out.update(res)
            say(
                f"RULER-style @ {length} tokens ({len(tasks)} tasks): average {res[f'ruler_avg/{length}']:.1f}"
                + (" (cached)" if hit else "")
            )
        out["eval_time_s/ruler"] = t_all

    if "ppl" in which and ev.ppl_sets:
        from ..data.text import heldout_windows

        t_all = 0.0
        for name in ev.ppl_sets:

            def do_ppl(name=name) -> dict[str, float]:
                t0 = time.perf_counter()
                windows = heldout_windows(name, tokenizer, train_len, trial_cfg.data.val_fraction)
                batches = (windows[i : i + ev.batch_size] for i in range(0, len(windows), ev.batch_size))
                p = perplexity(model, batches, tokenizer.token_bytes, device=device)
                return {f"ppl/{_set_name(name)}": p.ppl, f"bpb/{_set_name(name)}": p.bpb, "eval_time_s/ppl": time.perf_counter() - t0}

            res, _ = cached(
                {
                    "kind": "ppl",
                    "weights": wh,
                    "tok": tok_id,
                    "set": name,
                    "seq_len": train_len,
                    "val_fraction": trial_cfg.data.val_fraction,
                },
                do_ppl,
            )
            t_all += res.pop("eval_time_s/ppl", 0.0)  # the time of the evaluation itself, also on a cache hit
            out.update(res)
        out["eval_time_s/ppl"] = t_all
        say("perplexity: " + ", ".join(f"{k} {v:.3f}" for k, v in out.items() if k.startswith("ppl/")))
    return out


_MIN_LENGTH: dict[tuple[str, str], int] = {}


def ruler_min_length(task: str, tokenizer) -> int:
    """Shortest context at which RULER's prompt for `task` fits with this tokenizer."""
    from .ruler import min_length

    key = (task, tokenizer.fingerprint())
    if key not in _MIN_LENGTH:
        _MIN_LENGTH[key] = min_length(task, tokenizer)
    return _MIN_LENGTH[key]


def _set_name(source: str) -> str:
    """A metric-key-safe name for a perplexity set (a corpus name, or a file's stem)."""
    return Path(source).stem if ("/" in source or "." in source) and not source.startswith("hf:") else source.replace(":", "_")
