"""Load: a 100-trial sweep of tiny trials on a local Ray (a separate target: `pytest -m load`).

Checks 100 child runs with every final metric, that the driver's memory stays bounded, and
reports how busy the CPUs were (goal >= 90% of cores)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import psutil
import pytest
import yaml

from orchestrator.trial.run import FINAL_METRICS

pytestmark = [pytest.mark.load, pytest.mark.slow]  # out of the fast tier as well as the default run


def test_hundred_trial_sweep(tmp_path):
    sweep = {
        "name": "load",
        "base": {
            "model": {"size": "bigram-1l"},
            "data": {"seq_len": 32},
            "train": {"steps": 40, "batch_size": 16, "eval_every": 0, "log_every": 10, "warmup_steps": 2},
            "eval": {"batches": 1, "batch_size": 8, "probe_sequences": 4},
        },
        "grid": {"model.gate.position": ["none", "G1"], "train.seed": list(range(50))},
        "tracking": {"experiment": "load"},
    }
    f = tmp_path / "load.yaml"
    f.write_text(yaml.safe_dump(sweep))
    driver = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "run", str(f), "--runs-dir", str(tmp_path / "runs")],
        cwd=tmp_path,
        stdout=open(tmp_path / "driver.log", "w"),
        stderr=subprocess.STDOUT,
    )
    rss, cpu = [], []
    stop = threading.Event()

    def watch():
        proc = psutil.Process(driver.pid)
        psutil.cpu_percent(None)
        while not stop.is_set():
            try:
                rss.append(proc.memory_info().rss)
            except psutil.NoSuchProcess:
                return
            cpu.append((psutil.cpu_percent(interval=2.0), time.time()))

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    code = driver.wait(timeout=3600)
    stop.set()
    t.join()
    log = (tmp_path / "driver.log").read_text()
    assert code == 0, log[-3000:]
    from orchestrator.tracking import client

    c = client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = c.get_experiment_by_name("load")
    kids = [r for r in c.search_runs([exp.experiment_id], max_results=1000) if r.data.tags.get("gatesweep.kind") != "sweep"]
    assert len(kids) == 100 and all(r.info.status == "FINISHED" for r in kids)
    for r in kids:
        expected = [k for k in FINAL_METRICS if not (r.data.params["model.gate.position"] == "none" and k == "gate_score_mean")]
        assert all(k in r.data.metrics for k in expected), r.info.run_name
    # bounded: the driver's memory in the last quarter is not much above the first quarter's
    q = max(1, len(rss) // 4)
    early, late = max(rss[:q]), max(rss[-q:])
    # CPU busy over the driver's whole life, and from the launch (the child runs are created just
    # before it) to the last trial's end, which leaves out the driver's start and final store queries
    first, last = min(r.info.start_time for r in kids) / 1e3, max(r.info.end_time for r in kids) / 1e3
    whole = [p for p, _ in cpu[1:-1]]
    during = [p for p, t in cpu if first + 2.0 <= t <= last]
    print(
        f"\n100 trials: driver RSS {early / 2**20:.0f} -> {late / 2**20:.0f} MiB (peak {max(rss) / 2**20:.0f}); "
        f"CPU busy {sum(whole) / max(1, len(whole)):.0f}% over the driver's {2 * len(cpu)} s, "
        f"{sum(during) / max(1, len(during)):.0f}% from the launch to the last trial's end ({last - first:.0f} s)"
    )
    assert late < early * 1.5 + 200 * 2**20, "driver memory grows with the number of trials"
    assert max(rss) < 3 * 2**30
