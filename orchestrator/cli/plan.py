"""`gatesweep plan FILE`: the expanded trial table (only the columns that vary) and counts:
total, duplicates dropped, excluded, already finished in the store; parameters per model;
training FLOPs (per token: 3 x the forward's 2 x matmul weights plus causal attention, counted
from the config by `gatedmodels.costs`; times the tokens). A sweep with a `ladder` also gets one
row per rung: parameters (non-embedding and total), tokens, steps, learning rate, and the
training FLOPs of each arm with what its variant adds over the rung's base model.
With --measure, a time estimate that is a sum of named parts, each measured on this machine now
(`orchestrator.launch.plan_time`): the driver's and Ray's start, each trial's start-up, training,
evaluations, the trials' layout on the slots and the report at the end. An Optuna search counts
its samples in the trials, the FLOPs and the time. A sweep that asks for GPUs this machine lacks
says so in one line."""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from gatedmodels.costs import model_costs
from orchestrator.core.errors import UserError
from orchestrator.ladder.plan import expected_vocab, recipe_text
from orchestrator.ladder.runs import RUNG_AXIS
from orchestrator.launch.runs import finished_runs
from orchestrator.ray.cluster import oversubscription
from orchestrator.tracking import sqlite_path

from ..launch.plan_eval import EvalColumn
from ..launch.plan_time import Measured, TrialTime, contention, estimate, lines, machine_load, measure, trial_time
from ..launch.plan_time import duration_text as _duration
from .commands import COMMAND_TABLE
from .common import print_table
from .run import resolve_uri
from .sweepfile import add_override_options, load_and_expand, overrides_of

PEAK_TFLOPS = 989.0
"""Dense bf16 TFLOP/s of an H100 or H200 (REFERENCE §8)."""
MFU = 0.4
"""OLMo-core's 1B models reach 39-40% on H100s (REFERENCE §8)."""


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("plan", help=COMMAND_TABLE["plan"].help, description=__doc__)
    p.add_argument("file", help="sweep YAML")
    add_override_options(p)
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
    vocab = expected_vocab(config.data) or config.model.vocab_size
    return model_costs(config.model.replace(vocab_size=vocab))


def trial_flops(config, workers: int = 1) -> float:
    tr = config.train
    tokens = tr.steps * tr.batch_size * tr.grad_accum * workers * config.data.seq_len
    return trial_costs(config).train_flops(config.data.seq_len) * tokens


def finished_hashes(uri: str, experiment: str) -> set[str]:
    """Finished config hashes, without creating a store that does not exist yet."""
    db = sqlite_path(uri)
    if db is not None and not db.exists():
        return set()
    try:
        return set(finished_runs(uri, experiment))
    except Exception as err:  # an unreachable store must not stop a dry run
        print(f"(could not read finished trials from the store: {type(err).__name__})")
        return set()


def load_note(cpus: int, load: float | None = None) -> str:
    """What the machine's load average says about the measurement ("" on a quiet machine)."""
    load = machine_load() if load is None else load
    if load <= 0.75 * cpus:
        return ""
    return f"note: the machine is busy (load average {load:.1f} on {cpus} cores): step times, and the sweep's, move with the load"


COST_FIELDS = ("train.steps", "train.batch_size", "train.grad_accum", "data.seq_len")
"""Sampled fields that change a trial's FLOPs (besides any model field)."""


def local_gpus() -> int:
    """GPUs this machine shows (NVIDIA's driver, or torch when it is already imported), honouring CUDA_VISIBLE_DEVICES."""
    if "torch" in sys.modules:
        return int(sys.modules["torch"].cuda.device_count())
    try:
        found = len(list(Path("/proc/driver/nvidia/gpus").iterdir()))
    except OSError:
        found = 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        found = min(found, len([v for v in visible.split(",") if v.strip() and v.strip() != "-1"]))
    return found


def gpu_note(res) -> str:
    """One line when the sweep asks for GPUs this machine does not have ("" otherwise)."""
    need = res.gpus_per_worker * res.workers_per_trial
    have = local_gpus()
    if not res.gpus_per_worker or have >= need:
        return ""
    return (
        f"note: this machine has {have} GPU{'s' if have != 1 else ''}; the sweep asks for {need:g} per trial "
        f"(resources.gpus_per_worker {res.gpus_per_worker:g} x workers_per_trial {res.workers_per_trial}): run it on a "
        "GPU cluster (--address); here no trial would start"
    )


@dataclass
class Planned:
    """What `run` works out before it prints: the table's rows and the times it measured."""

    rows: list[dict] = field(default_factory=list)
    flops: float = 0.0
    measured: Measured | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    """Config hash -> a trial's estimated seconds (all its samples), for the ladder's rows."""
    to_run: list[TrialTime] = field(default_factory=list)


def run(args) -> int:
    if not (0 < args.gpu_tflops < 1e6):
        raise UserError(f"--gpu-tflops: got {args.gpu_tflops:g}; allowed: a positive number of TFLOP/s")
    if not (0 < args.mfu <= 1):
        raise UserError(f"--mfu: got {args.mfu:g}; allowed: 0 < MFU <= 1")
    overrides = overrides_of(args)
    spec, e = load_and_expand(args.file, overrides=overrides)
    if overrides:
        print(f"overrides: {overrides.describe()}")
    done = finished_hashes(resolve_uri(args, spec), spec.tracking.experiment)
    res = spec.resources
    samples = spec.search.num_samples if spec.search.type == "optuna" else 1
    gpus = gpu_note(res)
    measure_now = args.measure and not gpus
    cores, load = len(os.sched_getaffinity(0)), machine_load()
    slots = res.max_concurrent or max(1, int(cores // (res.cpus_per_worker * res.workers_per_trial)))
    evals = EvalColumn(measure_now, threads=int(res.cpus_per_worker) or 1)
    planned = plan_trials(spec, e, done, samples, measure_now=measure_now, cores=cores, load=load, slots=slots, evals=evals)
    n_left = print_plan(args, spec, e, planned, done, samples, gpus, measure_now)
    if planned.measured is not None:
        m = planned.measured
        est = estimate(planned.to_run, slots=slots, measured=m, ladder=bool(e.rungs))
        est.notes += benchmark_notes(e.trials)
        for line in lines(est, _duration):
            print(line)
        steps = sum(len(v) for v in m.steps.values())
        print(
            f"measured here now: {steps} training steps of {len(m.steps)} distinct model(s), a start-up probe P = {m.probe:.1f} s "
            f"(a fresh Python importing the trainer), {min(slots, n_left) or 1} trial(s) at once on {cores} cores"
        )
        if note := load_note(cores, load):
            print(note)
    for line in evals.lines(slots if measure_now else 1):
        print(line)
    return 0


def _model_key(t) -> str:
    tr = t.config.train
    return json.dumps(t.config.model.to_dict(), sort_keys=True) + json.dumps([tr.batch_size, tr.grad_accum, t.config.data.seq_len])


def plan_trials(spec, e, done: set[str], samples: int, *, measure_now: bool, cores: int, load: float, slots: int, evals=None) -> Planned:
    """Each trial's row (its axes, parameters, FLOPs with its samples, status) and, with
    `measure_now`, its time: the steps of each distinct model timed once."""
    res, out = spec.resources, Planned()
    threads = int(res.cpus_per_worker) or 1
    if measure_now:
        configs = {_model_key(t): t.config for t in e.trials}
        out.measured = measure(configs, threads)
    slow = contention(cores, load, min(slots, len(e.trials) * samples) * threads * res.workers_per_trial)
    for t in e.trials:
        flops = trial_flops(t.config, res.workers_per_trial) * samples
        out.flops += flops
        row = {
            "trial": t.name,
            **dict(t.axes.items()),
            "params": _count(trial_costs(t.config).params),
            "train FLOPs": f"{flops:.2e}" + (f" ({samples} x)" if samples > 1 else ""),
            "status": "finished" if t.config_hash in done else "to run",
        }
        if out.measured is not None:
            one = trial_time(t.config, out.measured.steps[_model_key(t)], slow=slow)
            out.seconds[t.config_hash] = one.total() * samples
            if t.config_hash not in done:
                out.to_run += [one] * samples
            row["est. time"] = _duration(one.total())
        if evals is not None:
            row.update(evals.row(t.name, t.config, finished=t.config_hash in done))
        out.rows.append(row)
    return out


def print_plan(args, spec, e, planned: Planned, done: set[str], samples: int, gpus: str, measure: bool) -> int:
    """The table, the ladder's rows, the counts, the compute and the notes; returns the trials to run."""
    search, res = samples > 1 or spec.search.type == "optuna", spec.resources
    if search:
        print(
            f"optuna search: {samples} samples per arm over {', '.join(spec.search.space)}; the arms (each row: one arm, all its samples):"
        )
    print_table(planned.rows[: args.max_rows])
    if len(planned.rows) > args.max_rows:
        print(f"... {len(planned.rows) - args.max_rows} more rows (--max-rows)")
    if e.rungs:
        print()
        print_ladder(spec, e, planned.seconds if measure else None)
    n_done = sum(t.config_hash in done for t in e.trials)
    n_all, n_left = len(e.trials) * samples, (len(e.trials) - n_done) * samples
    arms = f" x {samples} samples each = {n_all} trials" if search else ""
    print(
        f"\n{spec.name}: {e.cells} cells, {e.excluded} excluded, {e.duplicates} duplicates dropped -> {len(e.trials)} "
        f"{'arms' if search else 'trials'}{arms} ({n_done * samples} already finished in the store, {n_left} to run)"
    )
    sampled_cost = [p for p in spec.search.space if p in COST_FIELDS or p.startswith("model.")] if search else []
    at = f"; at the base values of {', '.join(sampled_cost)}, which the search samples" if sampled_cost else ""
    print(f"training compute: {planned.flops:.3e} FLOPs (per token 3 x (2 x matmul weights + causal attention), x tokens{at})")
    if spec.scheduler is not None and spec.scheduler.type == "asha":
        print("(ASHA stops trials early: the trials' compute and time are at most these)")
    if res.gpus_per_worker:
        hours = planned.flops / (args.gpu_tflops * 1e12 * args.mfu) / 3600
        print(f"on GPUs: {hours:,.0f} GPU-hours at {args.gpu_tflops:g} TFLOP/s per GPU and {args.mfu:.0%} MFU (--gpu-tflops, --mfu)")
    if gpus:
        print(gpus + ("; --measure times nothing on this machine" if args.measure else ""))
    warning = oversubscription(res)
    if warning and not gpus:
        print(f"warning: {warning} (on this machine; a cluster given with --address is checked at launch)")
    return n_left


def benchmark_notes(trials) -> list[str]:
    """The final benchmarks the trials run, which the estimate does not time."""
    found = set()
    for t in trials:
        ev = t.config.eval
        if ev.tasks.names:
            found.add("eval.tasks (lm-evaluation-harness)")
        if ev.ruler.enabled:
            found.add("eval.ruler")
        if ev.ppl_sets:
            found.add("eval.ppl_sets")
        if ev.length.lengths:
            found.add("eval.length")
    return [f"the final benchmarks ({', '.join(sorted(found))})"] if found else []


def print_ladder(spec, e, seconds: dict[str, float] | None) -> None:
    """One row per rung: shape, budget, settings, and each arm's training FLOPs against the rung's
    base model (what its variant adds per token, e.g. a G1 gate's d x d projection per layer)."""
    lad = spec.ladder
    print(f"ladder: {len(e.rungs)} rungs; {recipe_text(lad, e.trials[0].axis_config.model.d_model)}")
    train = e.trials[0].config.train
    if train.schedule == "wsd_s":
        print(
            f"points per run: {len(train.decays)} (a WSD-S decay ends at {', '.join(f'{x:g}' for x in train.decays)} of each run's steps)"
        )
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
            "tok/param (non-emb., total)": f"{plan.tokens / max(1, plan.base.params_non_embedding):.3g}, {plan.tokens / plan.base.params:.3g}",
            "batch": plan.batch_size,
            "steps": plan.steps,
            "warmup": f"{plan.warmup_steps} ({_count(plan.warmup_steps * plan.tokens_per_step)} tok)",
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
    top = last.base.train_flops(1) * last.tokens
    total = sum(r.base.train_flops(1) * r.tokens for r in e.rungs)
    print(f"share of the ladder's compute in its largest rung: {top / total:.0%}")


def _count(n: int) -> str:
    for unit, div in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= div:
            return f"{n / div:.2f}{unit}"
    return str(n)
