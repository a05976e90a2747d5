"""`gatesweep report` over a 1,000-run sweep: wall time against the goal of under 10 s.

The store is SYNTHETIC: this script fills a temporary SQLite store itself, with one parent run
and 1,000 child runs shaped like real trials (the full flattened trial config as ~100 params,
the trial's tags and axis tags, ~40 final metrics incl. per-layer ones, a 20-point train/loss
history, spikes.json and probes.json artifacts), 10 gate variants x 5 learning rates x 5 model
sizes x 4 seeds, with 2% FAILED and 1% RUNNING runs. The numbers are random, not training
results; only the report's speed is measured.

Timed, each as a fresh `gatesweep report` process (what a user waits for, Python start and
imports included), median of --repeats:
- tables only: `--no-plots --no-log`;
- full: plots, HTML/markdown, and the artifacts logged to the parent run;
- full, with the runs read through MLflow's `search_runs` instead of the SQLite reader (the path
  every non-SQLite store takes; GATESWEEP_REPORT_SEARCH_RUNS=1), for comparison;
plus the in-process breakdown (read, statistics, plots, write, log) of one full report.

    python benchmarks/report_scale.py [--runs 1000] [--repeats 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))

from common import table

from orchestrator.core import metrics as registry
from orchestrator.evals import probe_metrics as pm

TRAIN_LOSS = registry.get("train/loss").name

GOAL_S = 10.0
GATES = [
    "none",
    "G1-elementwise",
    "G1-headwise",
    "G1-elementwise-shared",
    "G1-elementwise-silu",
    "G1-elementwise-additive",
    "G2-elementwise",
    "G3-elementwise",
    "G4-elementwise",
    "G5",
]
LRS = ["0.001", "0.002", "0.003", "0.004", "0.008"]
SIZES = ["tiny", "small", "125m", "dense-0.5b", "dense-1.7b"]
LAYERS = 4


def base_params() -> dict[str, str]:
    """The flattened default trial config (what a trial logs as params)."""
    from orchestrator.spec.trial import TrialConfig

    cfg = TrialConfig.from_dict({"model": {"size": "small"}})
    params = {k: (json.dumps(v) if isinstance(v, (list, dict)) else str(v)) for k, v in cfg.flatten().items()}
    params.pop("tracking.uri", None)
    params.update({"data.vocab_size": "256", "world_size": "1", "model.num_params": "5300000", "model.gate_params": "0"})
    return params


def probe_templates() -> dict[bool, dict[str, float]]:
    """The probe metrics a trial logs (gated and ungated, LAYERS layers), from one real probe pass of
    an untrained tiny model through `probe_metrics`: the synthetic runs carry exactly the keys a
    trial's evaluation logs (the values are then made up)."""
    import torch

    from gatedmodels import GatedTransformer, ModelConfig

    out = {}
    for gated in (False, True):
        torch.manual_seed(0)
        gate = {"position": "G1"} if gated else {"position": "none"}
        model = GatedTransformer(ModelConfig.preset("tiny", n_layers=LAYERS, gate=gate)).eval()
        with torch.no_grad():
            _, probe = model.probe(torch.randint(0, model.cfg.vocab_size, (2, 16)))
        out[gated] = pm.probe_metrics(probe, 16, sink_eps=0.3, sink_tokens=64).metrics
    return out


def synthetic_metrics(rng: random.Random, gate: str, size: str, templates: dict[bool, dict[str, float]]) -> dict[str, float]:
    """Final metrics of one synthetic trial, every key a registry name: the held-out loss, the
    probe metrics of `templates` (gated models sink less: lower first-token attention, sink ratio
    and M-Act, as the paper reports), every end-of-trial metric of all trials, MMLU and RULER."""
    gated = gate != "none"
    ppl = 6.0 - (0.25 if gated else 0.0) + 0.05 * SIZES.index(size) + rng.gauss(0, 0.03)
    metrics = pm.loss_metrics(math.log(ppl), ppl, ppl / 4)
    fta = (0.05 if gated else 0.45) + rng.gauss(0, 0.01)
    m_act = (94 if gated else 1053) * rng.uniform(0.9, 1.1)
    headline = {pm.FIRST_TOKEN_ATTN: fta, pm.SINK_RATIO: 0.05 if gated else 0.9, pm.MAX_ACTIVATION: m_act}
    for key in templates[gated]:
        base, _, layer = key.partition("/layer_")
        if base in headline:
            metrics[key] = headline[base] * (rng.uniform(0.5, 1.5) if layer else 1.0)
        elif base in (pm.GATE_SCORE_MEAN,):
            metrics[key] = 0.12 + rng.uniform(0, 0.1)
        else:
            metrics[key] = templates[gated][key] * rng.uniform(0.9, 1.1)
    for m in registry.select(when="end", needs=""):
        # loss_spikes (fewer is better): a few; tokens_per_s (more is better): 50k; times: 600 s
        metrics[m.name] = float(rng.randint(0, 3)) if m.better == "min" else 50000 * rng.uniform(0.9, 1.1) if m.better == "max" else 600.0
    metrics[registry.get("mmlu/acc").name] = 0.25 + rng.uniform(0, 0.05)
    ruler = registry.prefixes("headline")[0]
    metrics.update({f"{ruler}512": 0.5 + rng.uniform(0, 0.1), f"{ruler}1024": 0.4 + rng.uniform(0, 0.1)})
    return metrics


def fill(uri: str, n_runs: int, name: str) -> str:
    """Write the synthetic sweep; return the parent run id."""
    from mlflow.entities import Metric, Param, RunTag

    from orchestrator.tracking import client, get_or_create_experiment

    cl = client(uri)
    exp = get_or_create_experiment(cl, "synthetic", uri)
    rng = random.Random(0)
    parent = cl.create_run(
        exp, run_name=name, tags={"gatesweep.kind": "sweep", "gatesweep.sweep": name, "gatesweep.synthetic": "true"}
    ).info.run_id
    cl.log_batch(
        parent,
        params=[
            Param(k, v)
            for k, v in {
                "sweep.cells": str(n_runs),
                "sweep.trials": str(n_runs),
                "sweep.search": "grid",
                "sweep.axes": "model.gate,train.lr,model.size,train.seed",
            }.items()
        ],
    )
    params0 = base_params()
    templates = probe_templates()
    now = int(time.time() * 1000)
    cells = [(g, lr, size, seed) for g in GATES for lr in LRS for size in SIZES for seed in range(4)]
    tmp = Path(tempfile.mkdtemp(prefix="gatesweep-bench-art-"))
    for i in range(n_runs):
        gate, lr, size, seed = cells[i % len(cells)]
        status = "FAILED" if i % 50 == 7 else ("RUNNING" if i % 100 == 13 else "FINISHED")
        tags = {
            "gatesweep.sweep": name,
            "gatesweep.config_hash": f"{i:016x}",
            "gatesweep.trial_name": f"{gate}-{size}-lr={lr}-s{seed}",
            "mlflow.parentRunId": parent,
            "gatesweep.axis.model.gate": gate,
            "gatesweep.axis.train.lr": lr,
            "gatesweep.axis.model.size": size,
            "gatesweep.axis.train.seed": str(seed),
            "gatesweep.gate": gate,
            "gatesweep.task": "shakespeare",
            "gatesweep.host": "synthetic",
            "gatesweep.synthetic": "true",
            "version.torch": "2.13.0",
            "version.mlflow": "3.17.2",
            "git.commit": "0" * 40,
            "git.dirty": "false",
            "gatesweep.deepspeed": json.dumps({"train_micro_batch_size_per_gpu": 16, "zero_optimization": {"stage": 0}}),
        }
        if status == "FAILED":
            tags["gatesweep.failure_reason"] = "loss is nan at step 812 (micro-batch 0); training diverged"
        run_id = cl.create_run(exp, run_name=tags["gatesweep.trial_name"], tags={"mlflow.parentRunId": parent}).info.run_id
        params = {**params0, "model.size": size, "train.lr": lr, "train.seed": str(seed), "model.gate.position": gate.split("-")[0]}
        metrics = synthetic_metrics(rng, gate, size, templates)
        points = [Metric(k, float(v), now, 3000) for k, v in metrics.items()]
        loss = 4.0
        for step in range(150, 3001, 150):
            loss = loss * 0.93 + rng.gauss(0, 0.01)
            points.append(Metric(TRAIN_LOSS, loss, now, step))
        items = [Param(k, v) for k, v in params.items()]
        tag_items = [RunTag(k, v) for k, v in tags.items() if k != "mlflow.parentRunId"]
        for j in range(0, len(items), 100):
            cl.log_batch(run_id, params=items[j : j + 100], tags=tag_items if j == 0 else [], metrics=points if j == 0 else [])
        art = tmp / run_id
        art.mkdir()
        (art / "spikes.json").write_text(json.dumps({"rules": {"rule": "sigma"}, "events": [{"step": 900, "rule": "sigma", "loss": 2.5}]}))
        hist = [[rng.randint(0, 50) for _ in range(50)] for _ in range(LAYERS)] if gate != "none" else None
        matrix = [[round(1.0 / (q + 1), 4) if k <= q else 0.0 for k in range(64)] for q in range(64)]
        (art / "probes.json").write_text(
            json.dumps(
                {
                    "first_token_attn_per_layer": [metrics[f"{pm.FIRST_TOKEN_ATTN}/layer_{k}"] for k in range(LAYERS)],
                    "first_token_attn_uniform": 0.032,
                    "attention_maps": [{"layer": LAYERS - 1, "head": 0, "matrix": matrix}],
                    "gate_histogram": None if hist is None else {"bins": 50, "range": [0, 1], "counts": hist},
                    "max_activation_per_layer": [metrics[f"{pm.MAX_ACTIVATION}/layer_{k}"] for k in range(LAYERS)],
                }
            )
        )
        cl.log_artifacts(run_id, str(art))
        if status != "RUNNING":
            cl.set_terminated(run_id, status=status)
        if (i + 1) % 200 == 0:
            print(f"  wrote {i + 1}/{n_runs} runs", flush=True)
    cl.set_terminated(parent, status="FINISHED")
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)  # the artifacts were copied into the store
    return parent


def timed_cli(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "report", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "100", **(env or {})},
    )
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"report failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return wall, out.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--keep", help="build the store in this folder and keep it (default: a temporary folder)")
    args = ap.parse_args()
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    root = Path(args.keep or tempfile.mkdtemp(prefix="gatesweep-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    uri = f"sqlite:///{root / 'mlflow.db'}"
    name = f"synthetic-{args.runs}"
    print(
        f"SYNTHETIC store (filled by this benchmark, random numbers, not training results): {args.runs} child runs "
        f"of sweep {name!r} in {uri}"
    )
    t0 = time.perf_counter()
    fill(uri, args.runs, name)
    print(f"filled in {time.perf_counter() - t0:.0f} s")

    rows, results = [], []
    first_out = ""
    api = {"GATESWEEP_REPORT_SEARCH_RUNS": "1"}
    for label, extra, env in (
        ("tables only (--no-plots --no-log)", ["--no-plots", "--no-log"], None),
        ("full: plots + HTML/md + log to parent", [], None),
        ("full, runs read via search_runs", [], api),
    ):
        times = []
        for _r in range(args.repeats):
            wall, out = timed_cli([name, "--tracking-uri", uri, "--out", str(root / "report"), *extra], root, env)
            times.append(wall)
            first_out = first_out or out
        med = statistics.median(times)
        rows.append(
            {
                "report": label,
                "median s": f"{med:.2f}",
                "runs s": " ".join(f"{t:.2f}" for t in times),
                "goal": f"< {GOAL_S:.0f} s",
                "met": "yes" if med < GOAL_S else "NO",
            }
        )
        results.append((f"report over {args.runs} runs, {label.split(' (')[0]}", round(med, 2), med < GOAL_S))

    from dashboards.report import build_report

    rep = build_report(uri, name, out_dir=root / "report-inproc")
    comp = rep.comparison
    breakdown = ", ".join(f"{k} {v:.2f} s" for k, v in rep.timings.items())
    print()
    print(table(rows, ["report", "median s", "runs s", "goal", "met"]))
    from common import result

    for label, value, ok in results:
        result(label, value, "< 10 s", ok, "s", note="synthetic store, fresh process")
    print(f"\nin-process breakdown of one full report (MLflow already imported): {breakdown}")
    print(
        f"{len(comp.sweep.runs)} runs -> {len(comp.rows)} configurations x {len(comp.metrics)} metric columns, "
        f"{len(comp.unfinished)} unfinished runs listed, {len(rep.plots)} plots; "
        f"HTML {rep.files['report.html'].stat().st_size / 1e6:.1f} MB"
    )
    print("first lines of the terminal table:\n" + "\n".join(first_out.splitlines()[:12]))
    if not args.keep:
        import shutil

        shutil.rmtree(root, ignore_errors=True)
    return 0 if all(r["met"] == "yes" for r in rows[:2]) else 1


if __name__ == "__main__":
    sys.exit(main())
