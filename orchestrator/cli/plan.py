"""`gatesweep plan FILE`: the expanded trial table (only the columns that vary) and counts:
total, duplicates dropped, excluded, already finished in the store; parameters per model;
training FLOPs (6 * N * tokens, N the parameters used per token, input embedding excluded).
With --measure, a time estimate from a few measured training steps of each distinct model."""

from __future__ import annotations

import argparse
import time

from .common import print_table


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("plan", help="show the trials a sweep would run (dry run)", description=__doc__)
    p.add_argument("file", help="sweep YAML")
    p.add_argument("--tracking-uri", help="store to look for finished trials (default as for run)")
    p.add_argument("--measure", action="store_true", help="time a few training steps per distinct model to estimate wall time")
    p.add_argument("--max-rows", type=int, default=200, help="trial rows to print (default 200)")
    return p


def model_costs(expansion) -> dict[str, tuple[int, int]]:
    """model config json -> (parameters, parameters per token for FLOPs), built on the meta device."""
    import json

    from gatedmodels import build_meta

    out = {}
    for t in expansion.trials:
        key = json.dumps(t.config.model.to_dict(), sort_keys=True)
        if key in out:
            continue
        m = build_meta(t.config.model)
        per_token = m.active_params() + (m.embed.weight.numel() if t.config.model.tie_embeddings else 0)
        out[key] = (m.num_params(), per_token)
    return out


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

    from .run import resolve_uri
    from .sweepfile import load_and_expand

    spec, e = load_and_expand(args.file)
    uri = resolve_uri(args, spec)
    done = finished_hashes(uri, spec.tracking.experiment)
    costs = model_costs(e)
    res = spec.resources
    rows, total_flops, total_s, low_s, high_s = [], 0.0, 0.0, 0.0, 0.0
    step_time: dict[str, list[float]] = {}
    for t in e.trials:
        key = json.dumps(t.config.model.to_dict(), sort_keys=True)
        params, per_token = costs[key]
        tr = t.config.train
        tokens = tr.steps * tr.batch_size * tr.grad_accum * res.workers_per_trial * t.config.data.seq_len
        flops = 6 * per_token * tokens
        total_flops += flops
        row = {
            "trial": t.name,
            **{k: v for k, v in t.axes.items()},
            "params": _count(params),
            "train FLOPs": f"{flops:.2e}",
            "status": "finished" if t.config_hash in done else "to run",
        }
        if args.measure:
            mkey = key + json.dumps([tr.batch_size, tr.grad_accum, t.config.data.seq_len])
            if mkey not in step_time:
                step_time[mkey] = measure_step(t.config, threads=int(res.cpus_per_worker) or 1)
            times = step_time[mkey]
            est = quantile(times, 0.5) * tr.steps
            if t.config_hash not in done:
                total_s += est
                low_s += quantile(times, 0.1) * tr.steps
                high_s += quantile(times, 0.9) * tr.steps
            row["est. time"] = _duration(est)
        rows.append(row)
    if spec.search.type == "optuna":
        print(f"optuna search: {spec.search.num_samples} samples per arm over {', '.join(spec.search.space)}; the arms:")
    print_table(rows[: args.max_rows])
    if len(rows) > args.max_rows:
        print(f"... {len(rows) - args.max_rows} more rows (--max-rows)")
    n_done = sum(t.config_hash in done for t in e.trials)
    print(
        f"\n{spec.name}: {e.cells} cells, {e.excluded} excluded, {e.duplicates} duplicates dropped -> {len(e.trials)} trials"
        f" ({n_done} already finished in the store, {len(e.trials) - n_done} to run)"
    )
    print(f"training compute: {total_flops:.3e} FLOPs (6 x params per token x tokens)")
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
    return 0


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
