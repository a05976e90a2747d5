"""Sweeps on a real local Ray with a real MLflow SQLite store: parent/child runs, failures,
retries after a killed worker, a killed driver resumed, skip-finished, Optuna with ASHA,
multi-worker trials and a two-node cluster. Every Ray process a test starts is stopped by pid.
Tests whose subject is the sweep, not Ray's own start and stop, join the session's Ray
(`shared_ray`, conftest.py): a local start and stop cost seconds each."""

from __future__ import annotations

import json
import os
import re
import signal

import psutil
import pytest
import yaml

from orchestrator.ray.cluster import kill_processes, ray_processes
from orchestrator.trial.run import FINAL_METRICS
from tests.support.cli import gatesweep, start_gatesweep, start_sweep, sweep_cli
from tests.support.mlflow import children, runs_of, sqlite_store, steps
from tests.support.ray import loopback_cluster
from tests.support.sweeps import write_sweep
from tests.support.wait import wait_until

pytestmark = pytest.mark.slow


def test_grid_sweep_parent_child_failure_and_skip_finished(tmp_path, shared_ray, no_ray_left_behind):
    f = write_sweep(
        tmp_path,
        "grid",
        base={"train": {"grad_clip": 0.0}},
        zip=[{"model.gate.position": ["none", "G1", "G2"], "train.lr": [0.003, 0.003, 1.0e10]}],
    )
    # a cache of its own, so this driver makes the cache's empty tracking store, and MLflow's own
    # "Creating initial MLflow database tables" is logged (a new store is otherwise a copy)
    cache = {"GATESWEEP_CACHE": str(tmp_path / "cache")}
    out = gatesweep("run", f, "--runs-dir", tmp_path / "runs", "--address", shared_ray, cwd=tmp_path, env=cache)
    assert out.returncode == 1, out.stdout + out.stderr  # one trial failed, the sweep went on
    assert "Traceback" not in out.stdout
    assert "2 finished, 1 failed" in out.stdout
    # live progress: the true total from the first line, counts that include the event they print
    lines = out.stdout.splitlines()
    progress = [ln for ln in lines if re.match(r"\[\d+/3 done · \d+ running · \d+ failed · \S+( · ETA \S+)?\] ", ln)]
    starts = [ln for ln in progress if "] start " in ln]
    ends = [ln for ln in progress if re.search(r"\] (done|failed) ", ln)]
    assert len(starts) == 3 and len(ends) == 3, out.stdout
    assert starts[0].startswith("[0/3 done · 1 running · 0 failed")
    finished = [int(m.group(1)) + int(m.group(2)) for ln in ends if (m := re.match(r"\[(\d+)/3 done · \d+ running · (\d+) failed", ln))]
    assert finished == [1, 2, 3], ends  # the first end line counts itself
    assert any(re.search(r"\] eval +\S+ +step 15/30 ", ln) for ln in progress), out.stdout  # each trial's step of its total
    assert re.search(r"^\[2/3 done · 0 running · 1 failed · \S+\]$", out.stdout, re.M), out.stdout  # the last status, no ETA
    # Ray's and MLflow's own lines are in the sweep's log file, not on the console
    console = out.stdout + out.stderr
    assert "Creating initial MLflow database tables" not in console and " INFO " not in console, console
    log = (tmp_path / "runs" / "sweeps" / "grid" / "sweep.log").read_text()
    assert "Creating initial MLflow database tables" in log
    c = sqlite_store(tmp_path)
    parent = [r for r in runs_of(c, "grid") if r.data.tags.get("gatesweep.kind") == "sweep"]
    assert len(parent) == 1 and parent[0].info.status == "FINISHED"
    kids = children(c, "grid")
    assert len(kids) == 3
    assert {r.data.tags["mlflow.parentRunId"] for r in kids} == {parent[0].info.run_id}
    by_name = {r.info.run_name: r for r in kids}
    assert set(by_name) == {"none", "G1-elementwise", "G2-elementwise-lr=1e+10"}
    bad = by_name["G2-elementwise-lr=1e+10"]
    assert bad.info.status == "FAILED" and "diverged" in bad.data.tags["gatesweep.failure_reason"]
    for name in ("none", "G1-elementwise"):
        run = by_name[name]
        assert run.info.status == "FINISHED"
        expected = [k for k in FINAL_METRICS if not (name.startswith("none") and k == "gate_score_mean")]
        assert all(k in run.data.metrics for k in expected), name
        assert run.data.tags["gatesweep.config_hash"] and run.data.tags["gatesweep.sweep"] == "grid"
        s = steps(c, run.info.run_id)
        assert len(s) == len(set(s)) == 6
    assert "summary.md" in {a.path for a in c.list_artifacts(parent[0].info.run_id)}

    # another sweep sharing two finished trials runs nothing and starts no Ray
    g = write_sweep(
        tmp_path, "again", zip=[{"model.gate.position": ["none", "G1"], "train.lr": [0.003, 0.003]}], base={"train": {"grad_clip": 0.0}}
    )
    plan = sweep_cli("plan", str(g), cwd=tmp_path)
    assert "2 already finished in the store, 0 to run" in plan.stdout
    again = sweep_cli("run", str(g), "--address", shared_ray, cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "2 already finished, 0 to run" in again.stdout and "Ray:" not in again.stdout
    assert len(children(c, "again")) == 0  # no new runs; the finished ones are tagged as reused
    for name in ("none", "G1-elementwise"):
        assert "gatesweep.also_in.again" in c.get_run(by_name[name].info.run_id).data.tags
    assert all(r.data.tags["gatesweep.kind"] == "trial" for r in kids)  # `kind = 'trial'` leaves the parents out
    # running it once more leaves no empty parent behind: its latest launch has every trial already
    first_parent = [r for r in runs_of(c, "again") if r.data.tags.get("gatesweep.kind") == "sweep"]
    once_more = sweep_cli("run", str(g), "--address", shared_ray, cwd=tmp_path)
    assert once_more.returncode == 0, once_more.stdout + once_more.stderr
    assert "nothing to run, no new parent run" in once_more.stdout and first_parent[0].info.run_id in once_more.stdout
    parents = [r for r in runs_of(c, "again") if r.data.tags.get("gatesweep.kind") == "sweep"]
    assert [p.info.run_id for p in parents] == [first_parent[0].info.run_id]
    assert "compare: gatesweep report again" in once_more.stdout and "Traceback" not in once_more.stderr


def test_killed_worker_is_retried_into_the_same_run_from_its_checkpoint(tmp_path, shared_ray, no_ray_left_behind):
    f = write_sweep(
        tmp_path, "retry", retries=2, base={"train": {"steps": 400, "checkpoint_every": 20, "eval_every": 100, "log_every": 10}}
    )
    driver = start_sweep("run", str(f), "--address", shared_ray, cwd=tmp_path)

    def trial_pid() -> int | None:
        if list((tmp_path / "runs").glob("sweeps/retry/trials/*/checkpoints/step*/COMPLETE")):
            kids = children(sqlite_store(tmp_path), "retry")
            return int(kids[0].data.tags["gatesweep.pid"]) if kids and "gatesweep.pid" in kids[0].data.tags else None
        return None

    pid = wait_until(trial_pid, 240, "a checkpointed trial's pid", interval=0.3, detail=(tmp_path / "driver.log").read_text)
    os.kill(pid, signal.SIGKILL)  # the Ray worker process running the trial
    assert driver.wait(timeout=300) == 0, (tmp_path / "driver.log").read_text()
    log = (tmp_path / "driver.log").read_text()
    assert "retry" in log
    c = sqlite_store(tmp_path)
    kids = children(c, "retry")
    assert len(kids) == 1, "a retry continues its own run"
    run = kids[0]
    assert run.info.status == "FINISHED"
    assert int(run.data.tags["gatesweep.resumed_from_step"]) >= 20
    s = steps(c, run.info.run_id)
    assert s == list(range(10, 401, 10)), "no duplicated and no missing points"


def test_killed_driver_then_resume_reruns_nothing_finished(tmp_path, no_ray_left_behind):
    f = write_sweep(
        tmp_path,
        "resume",
        grid={"model.gate.position": ["none", "G1", "G2"]},
        resources={"max_concurrent": 1},
        # the second trial has 380 steps (seconds) to go after its first checkpoint, time for the
        # test to see it and stop the machine before that trial ends
        base={"train": {"steps": 400, "checkpoint_every": 20, "eval_every": 200, "log_every": 20}},
    )
    driver = start_sweep("run", str(f), cwd=tmp_path)
    c = None

    def first_finished():
        nonlocal c
        if not (tmp_path / "mlflow.db").exists():
            return None
        c = c or sqlite_store(tmp_path)
        try:
            done = [r for r in children(c, "resume") if r.info.status == "FINISHED"]
        except Exception:
            done = []
        with_ckpt = {p.parts[-4] for p in (tmp_path / "runs").glob("sweeps/resume/trials/*/checkpoints/step*/COMPLETE")}
        return done[0] if done and len(with_ckpt) >= 2 else None

    first_done = wait_until(first_finished, 300, "one trial finished and two checkpointed", detail=(tmp_path / "driver.log").read_text)
    state = yaml.safe_load((tmp_path / "runs/sweeps/resume/state.json").read_text())
    # The machine dies under the sweep: freeze the driver and its Ray, then SIGKILL the driver and
    # the workers running trials together (a worker left running after its driver used to finish
    # its trial on a busy machine before it noticed, leaving nothing to resume). GCS and raylet
    # share the driver's fate (Ray sets PDEATHSIG on Linux) and die with it; the rest of the
    # frozen Ray (agents, idle workers) is thawed, to exit by itself or be stopped by `resume`.
    ray_procs = ray_processes(state["ray_session_dir"], state.get("ray_node_id"))
    for proc in [psutil.Process(driver.pid), *ray_procs]:
        proc.suspend()
    trial_workers = [p for p in ray_procs if p.is_running() and "ImplicitFunc" in " ".join(p.cmdline())]
    driver.send_signal(signal.SIGKILL)
    driver.wait(timeout=30)
    kill_processes(trial_workers)
    for proc in ray_procs:
        try:
            proc.resume()
        except psutil.NoSuchProcess:
            pass
    before = len(steps(c, first_done.info.run_id))
    unfinished = {r.info.run_id for r in children(c, "resume") if r.info.status != "FINISHED"}
    with_ckpt = {
        json.loads(p.read_text())["run_id"]
        for p in (tmp_path / "runs").glob("sweeps/resume/trials/*/run.json")
        if list(p.parent.glob("checkpoints/step*/COMPLETE"))
    }
    to_resume = unfinished & with_ckpt
    assert to_resume, "the kill left an unfinished trial with a whole checkpoint"
    out = sweep_cli("resume", "resume", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 already finished" in out.stdout or "already finished" in out.stdout
    kids = children(c, "resume")
    assert len(kids) == 3, "no duplicate runs"
    assert all(r.info.status == "FINISHED" for r in kids)
    assert len(steps(c, first_done.info.run_id)) == before, "the finished trial was not rerun"
    for r in kids:
        s = steps(c, r.info.run_id)
        assert s == list(range(20, 401, 20)), (r.info.run_name, s)
    for r in kids:
        if r.info.run_id in to_resume:
            assert int(r.data.tags.get("gatesweep.resumed_from_step", 0)) >= 20, r.info.run_name
    assert not ray_processes(state["ray_session_dir"], state.get("ray_node_id")), "the killed driver's Ray was stopped"


def test_optuna_with_asha(tmp_path, shared_ray, no_ray_left_behind):
    f = write_sweep(
        tmp_path,
        "opt",
        grid={"model.gate.position": ["G1"]},
        base={"train": {"steps": 40, "eval_every": 10}},
        search={
            "type": "optuna",
            "num_samples": 4,
            "metric": "val_loss",
            "mode": "min",
            "space": {"train.lr": {"loguniform": ["1e-4", "3e-2"]}},
        },
        scheduler={"type": "asha", "metric": "val_loss", "grace_period": 10, "max_t": 40, "reduction_factor": 2},
    )
    out = sweep_cli("run", str(f), "--address", shared_ray, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    c = sqlite_store(tmp_path)
    kids = children(c, "opt")
    assert len(kids) == 4
    lrs = {r.data.params["train.lr"] for r in kids}
    assert len(lrs) == 4 and all(1e-4 <= float(x) <= 3e-2 for x in lrs)
    statuses = {r.info.status for r in kids}
    assert statuses <= {"FINISHED", "KILLED"}
    for r in kids:
        assert "val_loss" in r.data.metrics
        if r.info.status == "KILLED":
            assert "stopped by the scheduler" in r.data.tags["gatesweep.stopped_early"]
    # progress counts every sample against the sweep's total; each sample is a group of its own in
    # the saved view (its sampled lr in the label), which draws their parallel coordinates
    assert re.search(r"^\[4/4 done · 0 running · 0 failed( · \d stopped early)? · \S+\]$", out.stdout, re.M), out.stdout
    from orchestrator.tracking import views

    exp = c.get_experiment_by_name("e")
    _, state = views.decode_view(exp.tags[views.view_tag("opt")])
    key = state["groupBy"]["groupByKeys"][0]["groupByData"]
    labels = {r.data.tags[key] for r in kids}
    assert len(labels) == 4 and all(re.fullmatch(r"lr=[0-9.e+-]+", g) for g in labels), labels
    assert all(r.data.tags["mlflow.runColor"] == views.group_colour(key, r.data.tags[key]) for r in kids)
    [par] = [ch for ch in state["compareRunCharts"] if ch["type"] == "PARALLEL"]
    assert par["selectedParams"] == ["train.lr"] and "val_loss" in par["selectedMetrics"]


def test_multi_worker_trial_runs_deepspeed_across_ray_train_workers(tmp_path, no_ray_left_behind):
    f = write_sweep(
        tmp_path,
        "workers",
        resources={"workers_per_trial": 2, "cpus_per_worker": 1},
        base={"model": {"size": "bigram-1l", "gate": {"position": "G1"}}, "train": {"steps": 10, "batch_size": 4, "eval_every": 0}},
    )
    out = sweep_cli("run", str(f), cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    kids = children(sqlite_store(tmp_path), "workers")
    assert len(kids) == 1 and kids[0].info.status == "FINISHED"
    assert kids[0].data.params["world_size"] == "2"


def test_two_node_cluster_places_trials_on_both_nodes(tmp_path, no_ray_left_behind):
    with loopback_cluster("127.0.0.3") as address:
        f = write_sweep(tmp_path, "cluster", grid={"model.gate.position": ["none", "G1"]}, base={"train": {"steps": 60, "eval_every": 0}})
        out = sweep_cli("run", str(f), "--address", address, cwd=tmp_path)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "cluster 127.0.0.2" in out.stdout
        kids = children(sqlite_store(tmp_path), "cluster")
        assert len(kids) == 2 and all(r.info.status == "FINISHED" for r in kids)
        nodes = {r.data.tags["gatesweep.node_id"] for r in kids}
        assert len(nodes) == 2, "one trial on each node"


def test_ctrl_c_stops_cleanly_and_leaves_a_resumable_sweep(tmp_path, no_ray_left_behind):
    f = write_sweep(
        tmp_path,
        "intr",
        grid={"model.gate.position": ["none", "G1"]},
        resources={"max_concurrent": 1},
        base={"train": {"steps": 200, "checkpoint_every": 20, "eval_every": 100, "log_every": 10}},
    )
    driver = start_gatesweep(
        "run",
        f,
        "--runs-dir",
        tmp_path / "runs",
        cwd=tmp_path,
        log=tmp_path / "driver.log",
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # as in a terminal
    wait_until(
        lambda: list((tmp_path / "runs").glob("sweeps/intr/trials/*/checkpoints/step*/COMPLETE")),
        240,
        "a checkpoint of sweep intr",
        interval=0.3,
        detail=(tmp_path / "driver.log").read_text,
    )
    driver.send_signal(signal.SIGINT)
    assert driver.wait(timeout=120) == 130, (tmp_path / "driver.log").read_text()
    text = (tmp_path / "driver.log").read_text()
    assert "gatesweep resume intr" in text and "Traceback" not in text
    c = sqlite_store(tmp_path)
    assert {r.info.status for r in children(c, "intr")} <= {"KILLED", "FINISHED"}
    out = sweep_cli("resume", "intr", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    kids = children(c, "intr")
    assert len(kids) == 2 and all(r.info.status == "FINISHED" for r in kids)
    for r in kids:
        assert steps(c, r.info.run_id) == list(range(10, 201, 10))
