"""A node lost mid-trial, and the object store down for 30 s, with the runs folder on S3 (issue 29).

Two worker nodes on loopback aliases, each with its own scratch folder and TMPDIR (nothing shared
but the bucket), the head without CPUs (it only hosts the driver), `retries: 1`. Once the trial
has a whole checkpoint in the bucket, the raylet of its node and every process of that node are
killed with SIGKILL: the trial is retried on the other node, from its last checkpoint downloaded
from the bucket, in the same MLflow run, every train/loss point exactly once.

Then a local sweep whose store is paused (SIGSTOP) for 10 s mid-trial: the upload of the next
checkpoint waits (pyarrow's request stays open, the retry loop backs off when one fails), training
resumes when the store does, and nothing is lost."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil
import pytest

from orchestrator.ray.cluster import kill_processes
from tests.support.cli import environ
from tests.support.mlflow import children, sqlite_uri, steps
from tests.support.ray import loopback_cluster
from tests.support.s3 import RUNS, no_secret_in, no_secret_under
from tests.support.sweeps import write_sweep

pytestmark = pytest.mark.slow

NODES = ("127.0.0.3", "127.0.0.4")


def node_processes(tmpdir: str) -> list:
    """Every process of one node: what its `ray start` started inherits its own TMPDIR (Ray's
    workers rename themselves, their environment stays), and their descendants."""
    found = {}
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("TMPDIR") == tmpdir and proc.pid != os.getpid():
                found[proc.pid] = proc
                for child in proc.children(recursive=True):
                    found.setdefault(child.pid, child)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return list(found.values())


def history(c, run_id: str) -> list:
    return sorted(c.get_metric_history(run_id, "train/loss"), key=lambda m: m.step)


def test_a_lost_node_resumes_its_trial_on_the_other_node_from_the_bucket(tmp_path, s3, no_ray_left_behind):
    import subprocess
    import sys

    from orchestrator.tracking import client

    node_env = {}
    for ip in NODES:
        d = Path(f"/tmp/gsn{os.getpid()}-{ip[-1]}")
        (d / "tmp").mkdir(parents=True, exist_ok=True)
        node_env[ip] = {"GATESWEEP_SCRATCH": str(d / "scratch"), "TMPDIR": str(d / "tmp")}
    f = write_sweep(
        tmp_path,
        "lost",
        retries=1,
        base={"train": {"steps": 300, "checkpoint_every": 20, "eval_every": 150, "log_every": 10}},
    )
    uri = sqlite_uri(tmp_path)
    try:
        with loopback_cluster(*NODES, head_args=("--num-cpus", "0"), node_env=node_env) as address:
            log = open(tmp_path / "driver.log", "w")
            driver = subprocess.Popen(
                [sys.executable, "-m", "orchestrator.cli", "run", str(f), "--address", address, "--runs-dir", RUNS, "--tracking-uri", uri],
                cwd=tmp_path,
                env=environ({"GATESWEEP_SCRATCH": str(tmp_path / "driver-scratch")}),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            c = client(uri)
            run, pid = None, None
            deadline = time.time() + 300
            while time.time() < deadline and pid is None and driver.poll() is None:
                try:
                    kids = children(c, "lost") if (tmp_path / "mlflow.db").exists() else []
                except Exception:
                    kids = []
                if kids and "gatesweep.pid" in kids[0].data.tags:
                    h = kids[0].data.tags["gatesweep.config_hash"]
                    whole = [
                        k for k in s3.object_keys("test-bucket", f"runs/sweeps/lost/trials/{h}/checkpoints/") if k.endswith("/COMPLETE")
                    ]
                    if whole:
                        run, pid = kids[0], int(kids[0].data.tags["gatesweep.pid"])
                time.sleep(0.3)
            assert pid is not None, (tmp_path / "driver.log").read_text()
            tmp = psutil.Process(pid).environ().get("TMPDIR")
            lost = next(ip for ip in NODES if node_env[ip]["TMPDIR"] == tmp)
            other = next(ip for ip in NODES if ip != lost)
            node_procs = node_processes(node_env[lost]["TMPDIR"])
            raylets = [p for p in node_procs if "raylet" in p.name()]
            assert raylets and any(p.pid == pid for p in node_procs), [(p.pid, p.name()) for p in node_procs]
            # the node is lost: its raylet and every process of it at once
            for p in node_procs:
                p.suspend()
            t_kill = time.time()
            kill_processes(node_procs)
            before = [m for m in history(c, run.info.run_id) if m.timestamp <= t_kill * 1000]
            first_new = None
            while time.time() < deadline + 300 and driver.poll() is None:
                after = [m for m in history(c, run.info.run_id) if m.timestamp > t_kill * 1000]
                if after and first_new is None:
                    first_new = min(m.timestamp for m in after) / 1000 - t_kill
                time.sleep(0.5)
            assert driver.wait(timeout=600) == 0, (tmp_path / "driver.log").read_text()
            out = (tmp_path / "driver.log").read_text()
        r = c.get_run(run.info.run_id)
        assert r.info.status == "FINISHED"
        assert len(children(c, "lost")) == 1, "the retry continues the same MLflow run"
        assert steps(c, r.info.run_id) == list(range(10, 301, 10)), "every point exactly once"
        resumed = int(r.data.tags["gatesweep.resumed_from_step"])
        assert resumed >= 20 and resumed % 20 == 0
        assert r.data.tags["gatesweep.node_id"] != run.data.tags["gatesweep.node_id"], "resumed on the other node"
        # the other node had nothing of this trial: what it resumed from came from the bucket
        h = r.data.tags["gatesweep.config_hash"]
        mine = Path(node_env[other]["GATESWEEP_SCRATCH"]) / "sweeps/lost/trials" / h
        theirs = Path(node_env[lost]["GATESWEEP_SCRATCH"]) / "sweeps/lost/trials" / h
        assert (mine / "run.json").is_file() and (theirs / "run.json").is_file()
        assert "step300" in [p.parent.name for p in (mine / "checkpoints").glob("step*/COMPLETE")]
        assert max(int(p.parent.name[4:]) for p in (theirs / "checkpoints").glob("step*/COMPLETE")) < 300
        last_before = max(m.step for m in before)
        redone = last_before - resumed
        assert first_new is not None and first_new < 240
        print(
            f"\nlost node {lost}: first new metric point {first_new:.1f} s after the kill; steps redone {redone} (resumed from {resumed}, last logged {last_before})"
        )
        no_secret_in(out)
        for ip in NODES:  # each node's scratch and temporary files
            no_secret_under(Path(node_env[ip]["TMPDIR"]).parent)
    finally:
        import shutil

        for ip in NODES:
            kill_processes(node_processes(node_env[ip]["TMPDIR"]))
            shutil.rmtree(Path(node_env[ip]["TMPDIR"]).parent, ignore_errors=True)


def test_the_store_down_for_10_s_mid_trial_loses_nothing(tmp_path, s3, no_ray_left_behind):
    import subprocess
    import sys

    from orchestrator.tracking import client

    # 380 steps (seconds) to go after the first checkpoint: the store goes down while the trial still uploads
    f = write_sweep(tmp_path, "outage", base={"train": {"steps": 400, "checkpoint_every": 20, "eval_every": 200, "log_every": 20}})
    uri = sqlite_uri(tmp_path)
    log = open(tmp_path / "driver.log", "w")
    driver = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "run", str(f), "--runs-dir", RUNS, "--tracking-uri", uri],
        cwd=tmp_path,
        env=environ({"GATESWEEP_SCRATCH": str(tmp_path / "scratch")}),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    c = client(uri)
    run = None
    deadline = time.time() + 300
    while time.time() < deadline and run is None and driver.poll() is None:
        try:
            kids = children(c, "outage") if (tmp_path / "mlflow.db").exists() else []
        except Exception:
            kids = []
        if kids:
            h = kids[0].data.tags["gatesweep.config_hash"]
            if any(k.endswith("/COMPLETE") for k in s3.object_keys("test-bucket", f"runs/sweeps/outage/trials/{h}/checkpoints/")):
                run = kids[0]
        time.sleep(0.2)
    assert run is not None, (tmp_path / "driver.log").read_text()
    s3.pause()
    t_pause = time.time()
    try:
        time.sleep(10)
    finally:
        s3.resume()
    t_resume = time.time()
    assert driver.wait(timeout=600) == 0, (tmp_path / "driver.log").read_text()
    r = c.get_run(run.info.run_id)
    assert r.info.status == "FINISHED"
    assert steps(c, r.info.run_id) == list(range(20, 401, 20)), "nothing lost, nothing twice"
    h = r.data.tags["gatesweep.config_hash"]
    keys = s3.object_keys("test-bucket", f"runs/sweeps/outage/trials/{h}/")
    assert f"runs/sweeps/outage/trials/{h}/checkpoints/step400/COMPLETE" in keys
    assert f"runs/sweeps/outage/trials/{h}/model.pt" in keys
    assert "runs/sweeps/outage/state.json" in s3.object_keys("test-bucket", "runs/sweeps/outage/")
    # the stall: the longest gap between train/loss points against the usual one
    stamps = [m.timestamp / 1000 for m in history(c, r.info.run_id)]
    gaps = sorted(b - a for a, b in zip(stamps, stamps[1:]))
    stall = gaps[-1]
    print(f"\nstore paused {t_resume - t_pause:.1f} s: longest gap between points {stall:.1f} s (median {gaps[len(gaps) // 2]:.2f} s)")
    assert 5 < stall < 10 + 60, "training waited for the store, then went on"
    no_secret_in((tmp_path / "driver.log").read_text())
