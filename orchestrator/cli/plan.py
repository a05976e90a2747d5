"""`gatesweep plan FILE`: the expanded trial table (only the columns that vary) and counts:
total, duplicates dropped, excluded, already finished in the store; parameters per model;
training FLOPs (per token: 3 x the forward's 2 x matmul weights plus causal attention, counted
from the config by `gatedmodels.costs`; times the tokens). A sweep with a `ladder` also gets one
row per rung: parameters (non-embedding and total), tokens, steps, learning rate, and the
training FLOPs of each arm with what its variant adds over the rung's base model.
With --measure, a time estimate from a few measured training steps of each distinct model."""

from __future__ import annotations

import argparse
import time

from .common import UserError, print_table

PEAK_TFLOPS = 989.0
"""Dense bf16 TFLOP/s of an H100 or H200 (REFERENCE §8)."""
MFU = 0.4
"""OLMo-core's 1B models reach 39-40% on H100s (REFERENCE §8)."""


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("plan", help="show the trials a sweep would run (dry run)", description=__doc__)
    p.add_argument("file", help="sweep YAML")
    p.add_argument("--tracking-uri", help="store to look for finished trials (default as for run)")
    p.add_argument("--measure", action="store_true", help="time a few training steps per distinct model to estimate wall time")
    p.add_argument("--max-rows", type=int, default=200, help="trial rows to print (default 200)")
    p.add_argument(
        "--gpu-tflops",
        type=float,
        default=PEAK_TFLOPS,
        help=f"peak dense TFLOP/s of one GPU for the GPU-hour estimate of GPU sweeps (default {PEAK_TFLOPS:g}: H100/H200 bf16)",
    )
    p.add_argument("--mfu", type=float, default=MFU, help=f"model FLOPs utilisation assumed for that estimate (default {MFU:g})")
    return p


def trial_costs(config):
    """`gatedmodels.costs.ModelCosts` of a trial's model with the vocabulary its tokenizer will have."""
    from gatedmodels.costs import model_costs
    from orchestrator.spec.ladder import expected_vocab

    vocab = expected_vocab(config.data) or config.model.vocab_size
    return model_costs(config.model.replace(vocab_size=vocab))


def trial_flops(config, workers: int = 1) -> float:
    tr = config.train
    tokens = tr.steps * tr.batch_size * tr.grad_accum * workers * config.data.seq_len
    return trial_costs(config).train_flops(config.data.seq_len) * tokens


def finished_hashes(uri: str, experiment: str) -> set[str]:
    """Finished config hashes, without creating a store that does not exist yet."""
    from orchestrator.tracking import sqlite_path

    db = sqlite_path(uri)
    if db is not None and not db.exists():
        return set()
    from orchestrator.launch.runs import finished_runs

    try:
        return set(finished_runs(uri, experiment))
    except Exception as err:  # an unreachable store must not stop a dry run
        print(f"(could not read finished trials from the store: {type(err).__name__})")
        return set()


def measure_step(cfg, *, threads: int = 1, budget_s: float = 1.0, min_steps: int = 5, max_steps: int = 30) -> list[float]:
    """Seconds of each optimizer step of a plain torch loop on this trial's model and batch, with
    the trial's thread count: steps after a warm-up one until `budget_s` is spent (at least
    `min_steps`, at most `max_steps`), so a busy machine's spread shows."""
    import torch
    import torch.nn.functional as F

    from gatedmodels import GatedTransformer

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


def quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def load_note(cpus: int) -> str:
    """What the machine's load average says about the measurement ("" on a quiet machine)."""
    import os

    try:
        load = os.getloadavg()[0]
    except OSError:
        return ""
    if load <= 0.75 * cpus:
        return ""
    return f"note: the machine is busy (load average {load:.1f} on {cpus} cores): step times, and the sweep's, move with the load"


def run(args) -> int:
    import json

    from .plan_eval import EvalColumn
    from .run import resolve_uri
    from .sweepfile import load_and_expand

    if not (0 < args.gpu_tflops < 1e6):
        raise UserError(f"--gpu-tflops: got {args.gpu_tflops:g}; allowed: a positive number of TFLOP/s")
    if not (0 < args.mfu <= 1):
        raise UserError(f"--mfu: got {args.mfu:g}; allowed: 0 < MFU <= 1")
    spec, e = load_and_expand(args.file)
    uri = resolve_uri(args, spec)
    done = finished_hashes(uri, spec.tracking.experiment)
    res = spec.resources
    rows, total_flops, total_s, low_s, high_s = [], 0.0, 0.0, 0.0, 0.0
    step_time: dict[str, list[float]] = {}
    seconds: dict[str, float] = {}
    evals = EvalColumn(args.measure, threads=int(res.cpus_per_worker) or 1)
    for t in e.trials:
        costs = trial_costs(t.config)
        flops = trial_flops(t.config, res.workers_per_trial)
        total_flops += flops
        row = {
            "trial": t.name,
            **{k: v for k, v in t.axes.items()},
            "params": _count(costs.params),
            "train FLOPs": f"{flops:.2e}",
            "status": "finished" if t.config_hash in done else "to run",
        }
        if args.measure:
            tr = t.config.train
            mkey = json.dumps(t.config.model.to_dict(), sort_keys=True) + json.dumps([tr.batch_size, tr.grad_accum, t.config.data.seq_len])
            if mkey not in step_time:
                step_time[mkey] = measure_step(t.config, threads=int(res.cpus_per_worker) or 1)
            times = step_time[mkey]
            est = seconds[t.config_hash] = quantile(times, 0.5) * tr.steps
            if t.config_hash not in done:
                total_s += est
                low_s += quantile(times, 0.1) * tr.steps
                high_s += quantile(times, 0.9) * tr.steps
            row["est. time"] = _duration(est)
        row.update(evals.row(t.name, t.config, finished=t.config_hash in done))
        rows.append(row)
    if spec.search.type == "optuna":
        print(f"optuna search: {spec.search.num_samples} samples per arm over {', '.join(spec.search.space)}; the arms:")
    print_table(rows[: args.max_rows])
    if len(rows) > args.max_rows:
        print(f"... {len(rows) - args.max_rows} more rows (--max-rows)")
    if e.rungs:
        print()
        print_ladder(spec, e, seconds if args.measure else None)
    n_done = sum(t.config_hash in done for t in e.trials)
    print(
        f"\n{spec.name}: {e.cells} cells, {e.excluded} excluded, {e.duplicates} duplicates dropped -> {len(e.trials)} trials"
        f" ({n_done} already finished in the store, {len(e.trials) - n_done} to run)"
    )
    print(f"training compute: {total_flops:.3e} FLOPs (per token 3 x (2 x matmul weights + causal attention), x tokens)")
    if res.gpus_per_worker:
        hours = total_flops / (args.gpu_tflops * 1e12 * args.mfu) / 3600
        print(f"on GPUs: {hours:,.0f} GPU-hours at {args.gpu_tflops:g} TFLOP/s per GPU and {args.mfu:.0%} MFU (--gpu-tflops, --mfu)")
    from orchestrator.ray.cluster import oversubscription

    warning = oversubscription(res)
    if warning:
        print(f"warning: {warning} (on this machine; a cluster given with --address is checked at launch)")
    if args.measure:
        cpus = len(__import__("os").sched_getaffinity(0))
        conc = res.max_concurrent or max(1, int(cpus // (res.cpus_per_worker * res.workers_per_trial)))
        steps = sum(len(v) for v in step_time.values())
        print(
            f"estimated wall time: {_duration(total_s / conc)} at {conc} trials at once ({_duration(low_s / conc)} to "
            f"{_duration(high_s / conc)} over the spread of {steps} measured steps, 10th to 90th percentile; a plain torch "
            "step on this machine, without the evaluations and the ~5-10 s fixed cost of each trial)"
        )
        if note := load_note(cpus):
            print(note)
    for line in evals.lines(conc if args.measure else 1):
        print(line)
    return 0


def print_ladder(spec, e, seconds: dict[str, float] | None) -> None:
    """One row per rung: shape, budget, settings, and each arm's training FLOPs against the rung's
    base model (what its variant adds per token, e.g. a G1 gate's d x d projection per layer)."""
    from orchestrator.spec.ladder import RUNG_AXIS

    lad = spec.ladder
    budget = (
        "per-rung FLOP budgets"
        if lad.flops is not None
        else f"{lad.tokens_per_param:g} tokens per {'non-embedding ' if lad.params == 'non_embedding' else ''}parameter"
    )
    lr = (
        f"lr x (d_model {e.trials[0].axis_config.model.d_model} / rung d_model)^{lad.lr_exponent:g}"
        if lad.lr_rule == "width"
        else "lr fixed"
    )
    warm = f"warmup {lad.warmup_fraction:.0%} of steps" if lad.warmup_fraction is not None else "warmup train.warmup_steps"
    print(f"ladder: {len(e.rungs)} rungs; budget {budget}; {lr}; {warm}; rungs' own steps/lr/batch win")
    arm_axes = [a for a in e.varying if a != RUNG_AXIS and a.rsplit(".", 1)[-1] != "seed"]
    rows = []
    for plan in e.rungs:
        trials = [t for t in e.trials if t.rung is plan]
        base = plan.base.train_flops(trials[0].config.data.seq_len) * plan.tokens if trials else 0.0
        arms: dict[str, float] = {}
        for t in trials:
            label = " ".join(str(t.axes[a]) for a in arm_axes) or "all"
            arms.setdefault(label, trial_flops(t.config, spec.resources.workers_per_trial))
        row = {
            "rung": plan.name,
            "d_model": plan.d_model,
            "layers": plan.n_layers,
            "heads": f"{plan.n_heads}/{plan.n_kv_heads}x{plan.head_dim}",
            "params (non-emb.)": _count(plan.base.params_non_embedding),
            "params": _count(plan.base.params),
            "tokens": _count(plan.tokens),
            "steps": plan.steps,
            "warmup": plan.warmup_steps,
            "lr x": f"{plan.lr_factor:.3g}" if plan.lr is None else f"={plan.lr:g}",
            "base FLOPs": f"{base:.2e}",
        }
        for label, flops in arms.items():
            row[label] = f"{flops:.2e} ({(flops / base - 1) * 100:+.1f}%)" if base else f"{flops:.2e}"
        if seconds is not None:
            row["est. time"] = _duration(sum(seconds.get(t.config_hash, 0.0) for t in trials))
        rows.append(row)
    print_table(rows)
    first, last = e.rungs[0], e.rungs[-1]
    span = (last.base.train_flops(1) * last.tokens) / (first.base.train_flops(1) * first.tokens)
    print(f"compute span of the ladder: {span:.1f}x from {first.name} to {last.name} (base model, per trial)")


def _count(n: int) -> str:
    for unit, div in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= div:
            return f"{n / div:.2f}{unit}"
    return str(n)


def _duration(s: float) -> str:
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"
