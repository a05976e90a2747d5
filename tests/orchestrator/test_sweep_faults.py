"""Faults a real ablation meets, on a real Ray with a real MLflow store (issue 12): the session's
shared Ray where the test is about the sweep, a local one of the sweep's own where it is about
Ray's start and stop (signals, a second driver, a stale lock). Diverging trials under ASHA and
Optuna, scheduler stops at every reporting point, trials that fail
before training, a second driver on the same sweep, SIGTERM / SIGHUP, damaged state files,
edited sweep files on resume, and the COMPLETE marker written only after the step's evaluation."""

from __future__ import annotations

import json
import re
import signal
import socket
import time

import pytest
import yaml

from tests.support.cli import gatesweep, start_sweep, sweep_cli
from tests.support.mlflow import children, runs_of, sqlite_store, steps
from tests.support.ray import loopback_cluster
from tests.support.sweeps import write_sweep
from tests.support.wait import wait_until

pytestmark = pytest.mark.slow


def parent_of(c, sweep):
    parents = [r for r in runs_of(c, sweep) if r.data.tags.get("gatesweep.kind") == "sweep"]
    assert len(parents) == 1, [p.info.run_id for p in parents]
    return parents[0]


def retries_in(out) -> int:
    """Retry lines of the progress output (`[3/8 done · ...] retry   NAME: ...`)."""
    return sum(re.match(r"\[[^\]]*\] retry ", line) is not None for line in out.stdout.splitlines())


# ---- 1. divergence does not end ASHA or Optuna sweeps -------------------------------------------
def test_diverging_trials_under_asha_leave_the_grid_sweep_going(tmp_path, shared_ray, no_ray_left_behind):
    f = write_sweep(
        tmp_path,
        "div-asha",
        base={"train": {"grad_clip": 0.0, "steps": 30, "eval_every": 10}},
        zip=[{"model.gate.position": ["G2", "none", "G1"], "train.lr": [1.0e10, 0.003, 0.003]}],
        scheduler={"type": "asha", "metric": "val_loss", "grace_period": 10, "reduction_factor": 2},
        resources={"max_concurrent": 1},
        retries=3,
    )
    out = sweep_cli("run", str(f), cwd=tmp_path, address=shared_ray)
    assert out.returncode == 1, out.stdout + out.stderr  # a trial failed; the sweep went on
    assert "Traceback" not in out.stdout + out.stderr
    assert retries_in(out) == 0, "a diverged trial is never retried"
    c = sqlite_store(tmp_path)
    assert parent_of(c, "div-asha").info.status == "FINISHED"
    kids = {r.info.run_name: r for r in children(c, "div-asha")}
    assert len(kids) == 3
    bad = kids["G2-elementwise-lr=1e+10"]
    assert bad.info.status == "FAILED" and bad.data.tags["gatesweep.outcome"] == "diverged"
    assert "diverged" in bad.data.tags["gatesweep.failure_reason"]
    for name in ("none", "G1-elementwise"):
        run = kids[name]
        assert run.info.status in ("FINISHED", "KILLED"), (name, run.info.status)
        assert "val_loss" in run.data.metrics
    assert "[diverged]" in out.stdout


def test_diverging_samples_do_not_end_an_optuna_asha_sweep(tmp_path, shared_ray, no_ray_left_behind):
    """Half the learning-rate range diverges (lr > ~1 with no clipping): those samples fail,
    Optuna records them as failed, and every sample still runs."""
    f = write_sweep(
        tmp_path,
        "div-opt",
        grid={"model.gate.position": ["G1"]},
        base={"train": {"steps": 20, "eval_every": 10, "grad_clip": 0.0, "warmup_steps": 0}},
        search={
            "type": "optuna",
            "num_samples": 4,
            "metric": "val_loss",
            "mode": "min",
            "sampler": "random",
            "seed": 3,
            "space": {"train.lr": {"loguniform": ["1e-3", "1e12"]}},
        },
        scheduler={"type": "asha", "metric": "val_loss", "grace_period": 10, "reduction_factor": 2},
        retries=2,
    )
    out = sweep_cli("run", str(f), cwd=tmp_path, address=shared_ray)
    assert "Traceback" not in out.stdout + out.stderr, out.stdout + out.stderr
    c = sqlite_store(tmp_path)
    kids = children(c, "div-opt")
    assert len(kids) == 4, out.stdout + out.stderr
    lrs = {r.info.run_id: float(r.data.params["train.lr"]) for r in kids if "train.lr" in r.data.params}
    outcomes = {r.info.run_id: (r.info.status, r.data.tags.get("gatesweep.outcome")) for r in kids}
    diverged = [rid for rid, (st, oc) in outcomes.items() if oc == "diverged"]
    trained = [rid for rid, (st, oc) in outcomes.items() if st in ("FINISHED", "KILLED")]
    assert diverged and trained, (outcomes, lrs)  # seed 3 samples both sides of the divergence line
    assert all(outcomes[r][0] == "FAILED" for r in diverged)
    assert all(lrs[r] > 1 for r in diverged)
    assert out.returncode == 1 and retries_in(out) == 0
    assert parent_of(c, "div-opt").info.status == "FINISHED"


def test_a_sampled_config_that_does_not_validate_is_recorded_not_retried(tmp_path, shared_ray, no_ray_left_behind):
    """n_kv_heads 2 does not divide n_heads 3; Optuna's int range [2, 4] only says so when it samples 3."""
    f = write_sweep(
        tmp_path,
        "badcfg",
        grid={"model.gate.position": ["none"]},
        base={"model": {"size": "bigram-1l", "n_kv_heads": 2, "n_heads": 2}, "train": {"steps": 6, "eval_every": 0}},
        search={
            "type": "optuna",
            "num_samples": 6,
            "metric": "val_loss",
            "sampler": "random",
            "seed": 0,
            "space": {"model.n_heads": {"int": [2, 4]}},
        },
        retries=3,
    )
    out = sweep_cli("run", str(f), cwd=tmp_path, address=shared_ray)
    assert "Traceback" not in out.stdout + out.stderr
    c = sqlite_store(tmp_path)
    kids = children(c, "badcfg")
    assert len(kids) == 6, out.stdout + out.stderr
    bad = [r for r in kids if r.info.status == "FAILED"]
    assert bad, "seed 0 samples n_heads=3 at least once"
    for r in bad:
        assert r.data.tags["gatesweep.outcome"] == "bad_config"
        assert "n_heads" in r.data.tags["gatesweep.failure_reason"]
    assert out.returncode == 1 and retries_in(out) == 0


# ---- 2. a scheduler stop keeps every point, whatever the timing ---------------------------------
@pytest.mark.parametrize("max_t", [10, 20])
def test_asha_stop_at_each_reporting_point_keeps_every_metric(tmp_path, shared_ray, no_ray_left_behind, max_t):
    """ASHA stops every trial when it reaches max_t: at the first reporting point (10) or the
    second (20) of a 30-step run. Four trials on two slots, actors reused, as in real sweeps."""
    f = write_sweep(
        tmp_path,
        f"stop{max_t}",
        grid={"model.gate.position": ["none", "G1"], "train.seed": [0, 1]},
        base={"train": {"steps": 30, "eval_every": 10, "log_every": 5}},
        scheduler={"type": "asha", "metric": "val_loss", "grace_period": 10, "max_t": max_t, "reduction_factor": 2},
        resources={"max_concurrent": 2},
    )
    out = sweep_cli("run", str(f), cwd=tmp_path, address=shared_ray)
    assert out.returncode == 0, out.stdout + out.stderr
    c = sqlite_store(tmp_path)
    kids = children(c, f"stop{max_t}")
    assert len(kids) == 4
    at = []
    for r in kids:
        assert r.info.status == "KILLED", (r.info.run_name, r.info.status, r.data.tags.get("gatesweep.failure_reason"))
        assert r.data.tags["gatesweep.outcome"] == "stopped"
        stop = int(re.search(r"step (\d+)", r.data.tags["gatesweep.stopped_early"]).group(1))
        assert stop in range(10, max_t + 1, 10), r.data.tags["gatesweep.stopped_early"]  # ASHA's rungs, then max_t
        at.append(stop)
        assert steps(c, r.info.run_id) == list(range(5, stop + 1, 5)), r.info.run_name
        assert steps(c, r.info.run_id, "val_loss") == list(range(10, stop + 1, 10)), r.info.run_name
        assert steps(c, r.info.run_id, "first_token_attn") == list(range(10, stop + 1, 10))
    assert max_t in at, "some trial reached max_t"
    assert "4 stopped" in out.stdout


# ---- 3. a trial that fails before training keeps its reason -------------------------------------
def test_bad_data_stops_the_launch_naming_every_source(tmp_path):
    """Data is prepared in the driver before any trial starts (issue 14): an unreadable source in
    any cell refuses the launch with one line per source, and nothing is written."""
    (tmp_path / "empty.txt").write_text(" \n\n \t\n")  # not empty on disk (validation passes), no text in it
    (tmp_path / "binary.txt").write_bytes(bytes(range(256)) * 64)
    (tmp_path / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "BPE", "vocab": 7}}')
    good = tmp_path / "good.txt"
    good.write_text("the quick brown fox jumps over the lazy dog. " * 400)
    f = write_sweep(
        tmp_path,
        "early",
        base={
            "model": {"size": "tiny"},
            "train": {"steps": 4, "eval_every": 0, "batch_size": 2},
            "data": {"seq_len": 16, "tokenizer": "byte"},
            "eval": {"batches": 1, "batch_size": 4},
        },
        zip=[
            {
                "data.source": [str(tmp_path / "empty.txt"), str(tmp_path / "binary.txt"), str(good), str(good)],
                "data.tokenizer": ["byte", "byte", str(tmp_path / "tokenizer.json"), "byte"],
            }
        ],
        retries=5,
    )
    out = sweep_cli("run", str(f), cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    err = out.stderr
    assert "3 data source(s) cannot be used" in err and "nothing was launched" in err, err
    assert "empty.txt: no text" in err and "binary.txt: not UTF-8 text (byte 128)" in err, err
    assert "tokenizer.json cannot be loaded" in err, err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "mlflow.db").exists()


def test_a_trial_whose_data_fails_in_the_trial_records_bad_data(tmp_path):
    """On a cluster (--address) trials prepare their own data: the trial path still classifies the
    failure as bad_data with the file named (here through `gatesweep train`, the same trial code)."""
    (tmp_path / "binary.txt").write_bytes(bytes(range(256)) * 64)
    f = tmp_path / "t.yaml"
    f.write_text(
        yaml.safe_dump(
            {
                "model": {"size": "tiny"},
                "train": {"steps": 4, "eval_every": 0, "batch_size": 2},
                "data": {"source": str(tmp_path / "binary.txt"), "seq_len": 16},
                "eval": {"batches": 1, "batch_size": 4, "probe_sequences": 4},
                "tracking": {"experiment": "bad"},
            }
        )
    )
    out = sweep_cli("train", str(f), "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "binary.txt: not UTF-8 text" in out.stdout + out.stderr
    runs = sqlite_store(tmp_path).search_runs([sqlite_store(tmp_path).get_experiment_by_name("bad").experiment_id])
    assert [r.data.tags["gatesweep.outcome"] for r in runs] == ["bad_data"]
    assert "binary.txt: not UTF-8 text" in runs[0].data.tags["gatesweep.failure_reason"]


# ---- 4. one driver per sweep --------------------------------------------------------------------
def test_a_second_driver_on_the_same_sweep_is_refused(tmp_path, no_ray_left_behind):
    f = write_sweep(
        tmp_path,
        "twice",
        grid={"model.gate.position": ["none", "G1"]},
        resources={"max_concurrent": 1},
        base={"train": {"steps": 200, "eval_every": 100, "log_every": 10}},
    )
    first = start_sweep("run", str(f), cwd=tmp_path)
    lock = tmp_path / "runs/sweeps/twice/driver.lock"
    state = tmp_path / "runs/sweeps/twice/state.json"
    wait_until(lambda: lock.exists() and lock.read_text() and state.exists(), 120, "the first driver's lock and state", interval=0.2)
    second = sweep_cli("run", str(f), cwd=tmp_path)
    assert second.returncode == 2, second.stdout + second.stderr
    assert f"driver pid {first.pid} on host {socket.gethostname()}" in second.stderr
    assert "Traceback" not in second.stderr
    resume = sweep_cli("resume", "twice", cwd=tmp_path)
    assert resume.returncode == 2 and "already running" in resume.stderr, resume.stdout + resume.stderr
    # another --runs-dir cannot see the lock; the store still knows the live driver
    other = gatesweep("run", f, "--runs-dir", tmp_path / "other", cwd=tmp_path, timeout=300)
    assert other.returncode == 2 and f"already running in this store (driver pid {first.pid}" in other.stderr, other.stderr
    assert first.wait(timeout=300) == 0, (tmp_path / "driver.log").read_text()
    c = sqlite_store(tmp_path)
    parent_of(c, "twice")
    kids = children(c, "twice")
    assert len(kids) == 2 and all(r.info.status == "FINISHED" for r in kids)
    for r in kids:
        assert steps(c, r.info.run_id) == list(range(10, 201, 10))


def test_a_stale_lock_of_a_dead_driver_is_taken_over(tmp_path, no_ray_left_behind):
    f = write_sweep(tmp_path, "stale", base={"train": {"steps": 6, "eval_every": 0}})
    lock = tmp_path / "runs/sweeps/stale/driver.lock"
    lock.parent.mkdir(parents=True)
    lock.write_text(json.dumps({"pid": 999999, "host": socket.gethostname(), "started": 0}))
    out = sweep_cli("run", str(f), cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr


# ---- 6. signals, damaged state, edited files ----------------------------------------------------
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_stop_a_sweep_like_ctrl_c(tmp_path, no_ray_left_behind, sig):
    name = f"sig{int(sig)}"
    f = write_sweep(
        tmp_path,
        name,
        grid={"model.gate.position": ["none", "G1"]},
        resources={"max_concurrent": 1},
        base={"train": {"steps": 300, "checkpoint_every": 20, "eval_every": 100, "log_every": 10}},
    )
    driver = start_sweep("run", str(f), cwd=tmp_path)
    wait_until(
        lambda: list((tmp_path / "runs").glob(f"sweeps/{name}/trials/*/checkpoints/step*/COMPLETE")),
        240,
        f"a checkpoint of sweep {name}",
        interval=0.3,
        detail=(tmp_path / "driver.log").read_text,
    )
    driver.send_signal(sig)
    assert driver.wait(timeout=120) == 130, (tmp_path / "driver.log").read_text()
    text = (tmp_path / "driver.log").read_text()
    assert f"gatesweep resume {name}" in text and "Traceback" not in text and "SIGTERM" not in text.replace("signal SIGTERM", ""), text
    c = sqlite_store(tmp_path)
    assert parent_of(c, name).info.status == "KILLED"
    kids = children(c, name)
    assert {r.info.status for r in kids} <= {"KILLED", "FINISHED"}
    assert any(r.data.tags.get("gatesweep.outcome") == "interrupted" for r in kids)
    state = json.loads((tmp_path / f"runs/sweeps/{name}/state.json").read_text())
    assert "ray_session_dir" not in state, "Ray was stopped"


@pytest.mark.parametrize("gaps", [(0.05, 0.45), (0.3, 0.05)], ids=["fast-then-slow", "slow-then-fast"])
def test_three_ctrl_c_in_a_row_stop_the_sweep_once_and_leave_no_process(tmp_path, no_ray_left_behind, gaps):
    """Impatient Ctrl-C: three SIGINTs 0.05-0.5 s apart. The first stops the sweep; the others
    are noted, never cut the teardown short: exit 130, the parent closed, a resume hint, and no
    process of the sweep (the driver's Ray, its workers) alive afterwards (the fixture polls 15 s)."""
    name = f"ctrl3-{int(gaps[0] * 100)}"
    f = write_sweep(
        tmp_path,
        name,
        grid={"model.gate.position": ["none", "G1"]},
        resources={"max_concurrent": 2},
        base={"train": {"steps": 300, "checkpoint_every": 20, "eval_every": 100, "log_every": 10}},
    )
    driver = start_sweep("run", str(f), cwd=tmp_path)
    wait_until(
        lambda: list((tmp_path / "runs").glob(f"sweeps/{name}/trials/*/checkpoints/step*/COMPLETE")),
        240,
        f"a checkpoint of sweep {name}",
        interval=0.3,
        detail=(tmp_path / "driver.log").read_text,
    )
    driver.send_signal(signal.SIGINT)
    for gap in gaps:
        time.sleep(gap)
        driver.send_signal(signal.SIGINT)
    assert driver.wait(timeout=120) == 130, (tmp_path / "driver.log").read_text()
    text = (tmp_path / "driver.log").read_text()
    assert f"gatesweep resume {name}" in text and "Traceback" not in text, text
    c = sqlite_store(tmp_path)
    assert parent_of(c, name).info.status == "KILLED"
    state = json.loads((tmp_path / f"runs/sweeps/{name}/state.json").read_text())
    assert "ray_session_dir" not in state, "Ray was stopped"


DAMAGED = {
    "not_json": b"{ this is not json",
    "truncated": b'{"name": "dmg", "parent_run_id": "abc", "tri',
    "binary": bytes(range(256)),
    "a_list": b"[1, 2, 3]",
    "no_parent": b'{"name": "dmg", "trials": {}}',
    "parent_a_number": b'{"name": "dmg", "parent_run_id": 5, "trials": {}}',
    "trials_a_list": b'{"name": "dmg", "parent_run_id": "abc", "trials": []}',
    "trial_malformed": b'{"name": "dmg", "parent_run_id": "abc", "trials": {"h": {"run_id": 7}}}',
    "empty": b"",
    "null": b"null",
    "pid_a_string": b'{"name": "dmg", "parent_run_id": "abc", "trials": {}, "driver_pid": "x"}',
}


@pytest.mark.parametrize("case", sorted(DAMAGED))
def test_a_damaged_state_file_is_refused_in_one_line(tmp_path, case):
    folder = tmp_path / "runs/sweeps/dmg"
    folder.mkdir(parents=True)
    (folder / "state.json").write_bytes(DAMAGED[case])
    out = sweep_cli("resume", "dmg", cwd=tmp_path, timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    assert "damaged sweep state" in out.stderr and str(folder / "state.json") in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_resume_with_an_edited_sweep_file(tmp_path, shared_ray, no_ray_left_behind):
    f = write_sweep(tmp_path, "edit", grid={"model.gate.position": ["none"]}, base={"train": {"steps": 6, "eval_every": 0}})
    assert sweep_cli("run", str(f), cwd=tmp_path, address=shared_ray).returncode == 0
    doc = yaml.safe_load(f.read_text())
    doc["base"]["train"]["steps"] = 8
    f.write_text(yaml.safe_dump(doc))
    out = sweep_cli("resume", str(f), cwd=tmp_path, address=shared_ray)
    assert out.returncode == 2 and "base.train.steps: 6 -> 8" in out.stderr and "--force" in out.stderr, out.stderr
    out = sweep_cli("resume", str(f), "--force", cwd=tmp_path, address=shared_ray)
    assert out.returncode == 2 and "changes or removes 1 launched trial" in out.stderr, out.stderr
    named = sweep_cli("resume", "edit", cwd=tmp_path, address=shared_ray)
    assert named.returncode == 0, named.stdout + named.stderr
    assert "changed since launch (base.train.steps: 6 -> 8)" in named.stdout and "stored copy" in named.stdout
    doc["base"]["train"]["steps"] = 6
    doc["grid"]["model.gate.position"] = ["none", "G1"]  # adds a cell, keeps the launched one
    f.write_text(yaml.safe_dump(doc))
    out = sweep_cli("resume", str(f), "--force", cwd=tmp_path, address=shared_ray)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "adopting the edited sweep file" in out.stdout and "1 already finished, 1 to run" in out.stdout
    c = sqlite_store(tmp_path)
    assert len(children(c, "edit")) == 2 and parent_of(c, "edit")


# ---- COMPLETE after the evaluation of its step --------------------------------------------------
def test_complete_marker_comes_after_the_steps_evaluation(tmp_path, tracking_uri, monkeypatch):
    """A kill right after COMPLETE is written (simulated where the trainer prunes old checkpoints,
    the first thing after the marker) must not lose that step's evaluation."""
    from mlflow.tracking import MlflowClient

    from orchestrator.spec.trial import TrialConfig
    from orchestrator.trial import run as trial_mod

    cfg = TrialConfig.from_dict(
        {
            "model": {"size": "bigram-1l"},
            "data": {"seq_len": 32},
            "train": {"steps": 40, "batch_size": 8, "eval_every": 20, "checkpoint_every": 20, "log_every": 5},
            "eval": {"batches": 1, "batch_size": 8, "probe_sequences": 4},
        }
    )
    seen = {}

    def killed_after_marker(run_dir, keep):
        run = json.loads((run_dir / "run.json").read_text())["run_id"]
        seen["val_loss"] = [m.step for m in MlflowClient(tracking_uri).get_metric_history(run, "val_loss")]
        raise KeyboardInterrupt("killed right after COMPLETE")

    monkeypatch.setattr("orchestrator.trial.checkpoint.prune_checkpoints", killed_after_marker)
    with pytest.raises(KeyboardInterrupt):
        trial_mod.run_trial(cfg, trial_mod.TrialContext(run_dir=tmp_path / "r", tracking_uri=tracking_uri))
    assert (tmp_path / "r/checkpoints/step20/COMPLETE").exists()
    assert seen["val_loss"] == [20], "the step's evaluation was in the store when COMPLETE was written"


# ---- resources the cluster cannot meet ----------------------------------------------------------
def test_a_trial_the_cluster_cannot_fit_is_refused_before_any_run(tmp_path, no_ray_left_behind):
    with loopback_cluster(head_args=("--num-cpus", "1", "--num-gpus", "0")) as address:
        f = write_sweep(tmp_path, "nofit", resources={"gpus_per_worker": 1}, base={"train": {"steps": 4, "eval_every": 0}})
        out = sweep_cli("run", str(f), "--address", address, cwd=tmp_path, timeout=180)
        assert out.returncode == 2, out.stdout + out.stderr
        assert "resources: a trial needs 1 worker(s) of 1 CPU and 1 GPU each" in out.stderr and "1 CPU, 0 GPU" in out.stderr
        assert "Traceback" not in out.stderr
        assert not (tmp_path / "mlflow.db").exists() or not children(sqlite_store(tmp_path), "nofit")


def test_out_of_memory_is_recorded_as_such(tmp_path):
    """A model larger than the process may allocate (an 8 GiB address-space limit) fails as
    out_of_memory, with the allocator's message, in its MLflow run (permanent: not retried)."""
    import resource

    from mlflow.tracking import MlflowClient

    (tmp_path / "big.yaml").write_text(
        yaml.safe_dump(
            {
                "model": {
                    "size": "tiny",
                    "d_model": 8192,
                    "n_layers": 4,
                    "ffn_dim": 32768,
                    "n_heads": 4,
                    "n_kv_heads": 2,
                    "head_dim": 2048,
                },
                "data": {"seq_len": 16},
                "train": {"steps": 2, "batch_size": 2, "eval_every": 0},
                "eval": {"batches": 1, "batch_size": 4, "probe_sequences": 4},
            }
        )
    )

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))

    out = gatesweep("train", "big.yaml", "--quiet", cwd=tmp_path, timeout=300, preexec_fn=limit)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "trial failed: out of memory in model" in out.stderr and "Traceback" not in out.stderr
    c = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = c.search_runs([c.get_experiment_by_name("gatesweep").experiment_id])
    assert run.info.status == "FAILED" and run.data.tags["gatesweep.outcome"] == "out_of_memory"
    assert "allocate" in run.data.tags["gatesweep.failure_reason"]
