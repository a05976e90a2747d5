"""A real 8-trial sweep on a local Ray: the fixed cost each trial pays on top of its own training
steps, and how busy the CPUs are while the sweep runs.

- fixed cost per trial = (wall time after Ray is up x trials at once - sum of the trials' own
  training time) / trials: worker start, imports, DeepSpeed init, data, MLflow run, evaluation,
  checkpoint and artifacts, and any scheduling gap. Goal <= 5 s.
- CPU busy: system-wide CPU use sampled every second from Ray start to the end. Goal >= 90%.

    python benchmarks/sweep_overhead.py [--trials 8] [--steps 300]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))

from common import result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=8)
    p.add_argument("--steps", type=int, default=300)
    args = p.parse_args()

    import psutil

    from orchestrator.launch.launcher import Launcher
    from orchestrator.spec.expand import expand
    from orchestrator.spec.sweep import SweepSpec

    spec = SweepSpec.from_dict(
        {
            "name": "bench-sweep",
            "base": {
                "model": {"size": "bigram-1l"},
                "data": {"seq_len": 64},
                "train": {"steps": args.steps, "batch_size": 32, "eval_every": 0, "log_every": 50, "warmup_steps": 10},
                "eval": {"batches": 1, "batch_size": 16, "probe_sequences": 8},
            },
            "grid": {"train.seed": list(range(args.trials))},
            "tracking": {"experiment": "bench"},
        }
    )
    expansion = expand(spec)
    samples: list[tuple[float, float]] = []  # (time, CPU %) every second, for the whole run
    stop = threading.Event()

    def sample() -> None:
        psutil.cpu_percent(interval=None)
        while not stop.is_set():
            busy = psutil.cpu_percent(interval=1.0)
            samples.append((time.perf_counter(), busy))

    threading.Thread(target=sample, daemon=True).start()
    marks: dict[str, float] = {}

    def log(line: str) -> None:  # Tune pickles its callbacks: this closure holds only a dict
        if line.startswith("Ray:") and "ray_up" not in marks:
            marks["ray_up"] = time.perf_counter()

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "sweep.yaml"
        src.write_text("name: bench-sweep\n")
        launcher = Launcher(
            spec, expansion, source=src, runs_root=Path(tmp) / "runs", tracking_uri=f"sqlite:///{Path(tmp) / 'mlflow.db'}", log=log
        )
        t0 = time.perf_counter()
        outcome = launcher.run()
        t_end = time.perf_counter()
        stop.set()
    concurrency = max(1, len(os.sched_getaffinity(0)))
    train = sum(r.metrics.get("train_time_s", 0.0) for r in outcome.rows)
    after_ray = t_end - marks.get("ray_up", t0)
    fixed = (after_ray * concurrency - train) / len(outcome.rows)
    during = [b for t, b in samples if marks.get("ray_up", t0) + 1 <= t <= t_end]
    busy = sum(during) / len(during) if during else 0.0
    print(
        f"sweep of {len(outcome.rows)} trials x {args.steps} steps, {concurrency} at once: wall {t_end - t0:.1f} s "
        f"(Ray start {marks.get('ray_up', t0) - t0:.1f} s), trials' own training {train:.1f} s"
    )
    print(f"statuses: {[r.status for r in outcome.rows]}")
    result(
        "fixed cost per trial in a sweep",
        round(fixed, 2),
        "<= 5 s",
        fixed <= 5,
        "s",
        note=f"{concurrency} trials at once; Ray start ({marks.get('ray_up', t0) - t0:.1f} s) excluded",
    )
    result(
        "CPU busy during an 8-trial sweep",
        round(busy, 1),
        ">= 90%",
        busy >= 90,
        "%",
        note=f"{len(during)} one-second samples after Ray start",
    )


if __name__ == "__main__":
    main()
