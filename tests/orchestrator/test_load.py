"""Load: a 100-trial sweep of tiny trials on a local Ray (a separate target: `pytest -m load`).

Checks 100 child runs with every final metric, that the driver's memory stays bounded, and
reports how busy the CPUs were (goal >= 90% of cores)."""

from __future__ import annotations

import subprocess
import sys
import threading

import psutil
import pytest
import yaml

from orchestrator.trial import FINAL_METRICS

pytestmark = pytest.mark.load


def test_hundred_trial_sweep(tmp_path):
    sweep = {
        "name": "load",
        "base": {"model": {"size": "bigram-1l"}, "data": {"seq_len": 32},
                 "train": {"steps": 40, "batch_size": 16, "eval_every": 0, "log_every": 10, "warmup_steps": 2},
                 "eval": {"batches": 1, "batch_size": 8, "probe_sequences": 4}},
        "grid": {"model.gate.position": ["none", "G1"], "train.seed": list(range(50))},
        "tracking": {"experiment": "load"},
    }
    f = tmp_path / "load.yaml"
    f.write_text(yaml.safe_dump(sweep))
    driver = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "run", str(f), "--runs-dir", str(tmp_path / "runs")],
                              cwd=tmp_path, stdout=open(tmp_path / "driver.log", "w"), stderr=subprocess.STDOUT)
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
            cpu.append(psutil.cpu_percent(interval=2.0))

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
    busy = sum(cpu[1:-1]) / max(1, len(cpu) - 2)
    print(f"\n100 trials: driver RSS {early / 2**20:.0f} -> {late / 2**20:.0f} MiB (peak {max(rss) / 2**20:.0f}); "
          f"CPU busy {busy:.0f}% over {2 * len(cpu)} s")
    assert late < early * 1.5 + 200 * 2**20, "driver memory grows with the number of trials"
    assert max(rss) < 3 * 2**30
