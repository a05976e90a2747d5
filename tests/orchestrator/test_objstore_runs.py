"""The runs folder on an object store (issue 29): a real moto S3 server (`s3` fixture), real Ray,
real DeepSpeed on CPU, real MLflow (SQLite). `--runs-dir s3://test-bucket/runs`: the sweep's
state, stored sweep file, checkpoints, run.json, model.pt, artifacts, report and sweep.log are in
the bucket; every process works in its own scratch folder; `resume` from another folder and
another scratch finds everything; the driver lock is a conditional create; damaged and partial
checkpoints fall back; an unusable store is refused before anything is written; the secret key
appears nowhere."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from orchestrator.storage.location import Location
from tests.services.ports import free_port
from tests.support.cli import gatesweep, start_gatesweep
from tests.support.mlflow import children, runs_of, sqlite_uri, steps
from tests.support.s3 import RUNS, no_secret_in, no_secret_under
from tests.support.sweeps import write_sweep
from tests.support.trials import EXAMPLE, FAST


# ---- preflight: an unusable store is refused before anything is written ------------------------
@pytest.mark.parametrize("case", ["no credentials", "nothing listening", "no such bucket"])
def test_an_unusable_object_store_is_refused_in_one_line_writing_nothing(tmp_path, s3, case):
    f = write_sweep(tmp_path, "pre", base={"train": {"steps": 4, "eval_every": 0}})
    env: dict = {"GATESWEEP_SCRATCH": str(tmp_path / "scratch"), "MLFLOW_TRACKING_URI": sqlite_uri(tmp_path)}
    runs, expect = RUNS, ""
    if case == "no credentials":
        for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
            env[k] = None  # removed
        env.update(AWS_CONFIG_FILE=str(tmp_path / "none"), AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"))
        expect = "no S3 credentials"
    elif case == "nothing listening":
        env["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{free_port()}"
        expect = "does not answer"
    else:
        runs, expect = "s3://no-such-bucket/runs", "bucket 'no-such-bucket' does not exist"
    t0 = time.time()
    out = gatesweep("run", str(f), "--runs-dir", runs, cwd=tmp_path, env=env, timeout=120)
    resume = gatesweep("resume", "pre", "--runs-dir", runs, cwd=tmp_path, env=env, timeout=120)
    took = time.time() - t0
    for o in (out, resume):
        assert o.returncode == 2, o.stdout + o.stderr
        lines = o.stderr.strip().splitlines()
        assert len(lines) == 1 and runs in lines[0] and expect in lines[0], o.stderr
        assert "Traceback" not in o.stdout + o.stderr
        no_secret_in(o.stdout, o.stderr)
    assert took < 150  # no retry loop: the store's retries alone would take 300 s a command
    assert not (tmp_path / "runs").exists() and not (tmp_path / "mlflow.db").exists() and not (tmp_path / "scratch").exists()
    assert s3.object_keys("test-bucket") == []


def test_resume_of_a_missing_or_damaged_sweep_on_s3_is_refused_in_one_line(tmp_path, s3):
    env = {"GATESWEEP_SCRATCH": str(tmp_path / "scratch"), "MLFLOW_TRACKING_URI": sqlite_uri(tmp_path)}
    out = gatesweep("resume", "nosuch", "--runs-dir", RUNS, cwd=tmp_path, env=env, timeout=120)
    assert out.returncode == 2 and out.stderr.strip() == (
        f"gatesweep: error: no sweep named 'nosuch' in {RUNS}/sweeps (was it launched with another --runs-dir?)"
    ), out.stderr
    s3.client().put_object(Bucket="test-bucket", Key="runs/sweeps/bad/state.json", Body=b'{"name": 3')
    out = gatesweep("resume", "bad", "--runs-dir", RUNS, cwd=tmp_path, env=env, timeout=120)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and f"{RUNS}/sweeps/bad/state.json: damaged sweep state" in lines[0], out.stderr
    assert s3.object_keys("test-bucket") == ["runs/sweeps/bad/state.json"] and not (tmp_path / "mlflow.db").exists()


# ---- the driver lock: a conditional create with a heartbeat --------------------------------------
@pytest.mark.slow
def test_the_driver_lock_on_s3_refuses_a_second_driver_and_takes_over_a_stale_one(s3):
    from orchestrator.core.errors import UserError
    from orchestrator.launch.lock import SweepLock
    from orchestrator.storage.lease import ObjectLock

    folder = Location.parse(f"{RUNS}/sweeps/lk")
    first = ObjectLock(folder / "driver.lock", heartbeat_s=0.3, stale_s=2)
    assert first.acquire()
    # a second driver (here: another lock object) is refused, naming the holder
    with pytest.raises(UserError) as err:
        SweepLock(folder, "lk").acquire()
    assert f"driver pid {os.getpid()} on host {socket.gethostname()}" in str(err.value)
    assert "already running" in str(err.value)
    # the heartbeat keeps it fresh: after 2.5 s (more than stale_s) a contender still finds it live
    time.sleep(2.5)
    second = ObjectLock(folder / "driver.lock", stale_s=2)
    assert not second.acquire() and second.holder()["pid"] == os.getpid()
    first.release()
    assert s3.object_keys("test-bucket", "runs/sweeps/lk/") == []
    # a lock whose heartbeat stopped (its driver lost with its machine) is taken over once stale
    s3.client().put_object(
        Bucket="test-bucket",
        Key="runs/sweeps/lk/driver.lock",
        Body=json.dumps({"pid": 4242, "host": "lost-node", "started": 0}).encode(),
    )
    fresh = ObjectLock(folder / "driver.lock", stale_s=2)
    assert not fresh.acquire(), "a foreign host's lock written just now is live"
    time.sleep(4.1)  # stale_s, and the second HTTP dates round to, passed on the store's clock
    taker = ObjectLock(folder / "driver.lock", stale_s=2, heartbeat_s=0.3)
    assert taker.acquire() and taker.took_over["host"] == "lost-node" and "heartbeat" in taker.took_over["why"]
    # the lost driver's lock was overwritten: a holder that comes back finds out at its next beat
    assert json.loads(s3.client().get_object(Bucket="test-bucket", Key="runs/sweeps/lk/driver.lock")["Body"].read())["pid"] == os.getpid()
    taker.release()
    # a dead pid on this same host: taken over at once
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    s3.client().put_object(
        Bucket="test-bucket",
        Key="runs/sweeps/lk/driver.lock",
        Body=json.dumps({"pid": dead.pid, "host": socket.gethostname(), "started": 0}).encode(),
    )
    lock = SweepLock(folder, "lk", say=lambda line: None)
    lock.acquire()
    assert "no longer runs" in lock._lock.took_over["why"]
    # two contenders for a stale lock at once: exactly one wins (If-Match on the stale object)
    lock.release()
    s3.client().put_object(
        Bucket="test-bucket",
        Key="runs/sweeps/lk/driver.lock",
        Body=json.dumps({"pid": dead.pid, "host": socket.gethostname(), "started": 0}).encode(),
    )
    import threading

    racers = [ObjectLock(folder / "driver.lock") for _ in range(4)]
    won: list[bool] = []
    threads = [threading.Thread(target=lambda r=r: won.append(r.acquire())) for r in racers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(won) == [False, False, False, True]
    for r in racers:
        r.release()


def test_moto_honours_conditional_writes(s3):
    """What the lock relies on, checked on the server the tests use (moto 5.2)."""
    import botocore.exceptions

    c = s3.client()
    etag = c.put_object(Bucket="test-bucket", Key="k", Body=b"1", IfNoneMatch="*")["ETag"]
    with pytest.raises(botocore.exceptions.ClientError) as err:
        c.put_object(Bucket="test-bucket", Key="k", Body=b"2", IfNoneMatch="*")
    assert err.value.response["Error"]["Code"] == "PreconditionFailed"
    with pytest.raises(botocore.exceptions.ClientError):
        c.put_object(Bucket="test-bucket", Key="k", Body=b"3", IfMatch='"0"')
    c.put_object(Bucket="test-bucket", Key="k", Body=b"4", IfMatch=etag)
    assert c.get_object(Bucket="test-bucket", Key="k")["Body"].read() == b"4"


# ---- damaged and partial checkpoints on the store -----------------------------------------------
def test_a_damaged_or_partial_remote_checkpoint_falls_back_to_the_previous_whole_one(tmp_path, s3):
    from orchestrator.trial import checkpoint as ckpt

    work = tmp_path / "trainer"
    remote = Location.parse(f"{RUNS}/sweeps/ck/trials/abc")
    for step in (10, 20, 30):
        folder = ckpt.checkpoint_dir(work) / ckpt.tag(step)
        (folder / "sub").mkdir(parents=True)
        (folder / "model_states.pt").write_bytes(os.urandom(3000) + bytes([step]))
        (folder / "sub" / "optim.pt").write_bytes(os.urandom(500))
        ckpt.mark_complete(work, step)
        ckpt.upload_checkpoint(work, remote, step)
    keys = s3.object_keys("test-bucket", "runs/sweeps/ck/trials/abc/checkpoints/")
    assert "runs/sweeps/ck/trials/abc/checkpoints/step30/COMPLETE" in keys and len(keys) == 9
    fresh = tmp_path / "other-node"
    said: list[str] = []
    assert ckpt.download_latest(remote, fresh, say=said.append) == "step30" and not said
    assert (ckpt.checkpoint_dir(fresh) / "step30/model_states.pt").read_bytes() == (
        ckpt.checkpoint_dir(work) / "step30/model_states.pt"
    ).read_bytes()
    # damaged: same size, other bytes
    c = s3.client()
    key = "runs/sweeps/ck/trials/abc/checkpoints/step30/model_states.pt"
    c.put_object(Bucket="test-bucket", Key=key, Body=b"x" * 3001)
    assert ckpt.download_latest(remote, fresh, say=said.append) == "step20"
    assert "sha256" in said[-1] and "step30" in said[-1]
    assert not (ckpt.checkpoint_dir(fresh) / "step30").exists()
    # partial: a file of step20 missing (its upload stopped) though COMPLETE is there
    c.delete_object(Bucket="test-bucket", Key="runs/sweeps/ck/trials/abc/checkpoints/step20/sub/optim.pt")
    assert ckpt.download_latest(remote, fresh, say=said.append) == "step10"
    assert "missing" in said[-1]
    # a checkpoint whose upload never reached COMPLETE is not even considered
    c.delete_object(Bucket="test-bucket", Key="runs/sweeps/ck/trials/abc/checkpoints/step10/COMPLETE")
    assert ckpt.download_latest(remote, fresh, say=said.append) is None
    assert not list(ckpt.checkpoint_dir(fresh).glob("step*"))
    # pruning keeps the newest whole ones and drops older partial leftovers
    (ckpt.checkpoint_dir(work) / "step40").mkdir()
    (ckpt.checkpoint_dir(work) / "step40/model_states.pt").write_bytes(b"w")
    ckpt.upload_checkpoint(work, remote, 40)
    ckpt.prune_remote(remote, keep=1)
    keys = s3.object_keys("test-bucket", "runs/sweeps/ck/trials/abc/checkpoints/")
    left = {k.split("/")[6] for k in keys if not k.endswith("/")}  # pyarrow leaves a folder marker
    assert left == {"step40"}


# ---- a whole sweep on the store, killed, resumed elsewhere ---------------------------------------
@pytest.mark.slow
def test_a_sweep_on_s3_killed_then_resumed_from_another_folder(tmp_path, s3, no_ray_left_behind):
    """Two trials one after the other; a stale lock of a dead driver in the bucket; the driver
    is killed with SIGKILL once the first trial finished and the second has a whole checkpoint in
    the bucket; `resume` from another working folder with another scratch folder finishes it:
    the first trial is not rerun, the second continues from its downloaded checkpoint in its own
    MLflow run with every point once. The secret key is in no output, param, tag, state, report
    or Ray log."""
    a, b = tmp_path / "machine-a", tmp_path / "machine-b"
    a.mkdir(), b.mkdir()
    ray_tmp = Path(tempfile.mkdtemp(prefix="gso", dir="/tmp"))  # short: Ray's socket paths
    try:
        _sweep_killed_then_resumed(a, b, ray_tmp, s3)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)


def _sweep_killed_then_resumed(a: Path, b: Path, ray_tmp: Path, s3) -> None:
    import psutil

    from orchestrator.tracking import client

    f = write_sweep(
        a,
        "objs",
        grid={"model.gate.position": ["none", "G1"]},
        resources={"max_concurrent": 1},
        # long enough after its first checkpoint (300 steps, seconds) that the second trial is
        # still training when the test sees that checkpoint and stops the machine
        base={"train": {"steps": 400, "checkpoint_every": 100, "eval_every": 200, "log_every": 50}},
    )
    uri = sqlite_uri(a)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    s3.client().put_object(
        Bucket="test-bucket",
        Key="runs/sweeps/objs/driver.lock",
        Body=json.dumps({"pid": dead.pid, "host": socket.gethostname(), "started": 0}).encode(),
    )
    env_a = {"GATESWEEP_SCRATCH": str(a / "scratch"), "RAY_TMPDIR": str(ray_tmp), "TMPDIR": str(ray_tmp)}
    driver = start_gatesweep("run", str(f), "--runs-dir", RUNS, "--tracking-uri", uri, cwd=a, log=a / "driver.log", env=env_a)
    c = client(uri)
    second = None
    deadline = time.time() + 400
    while time.time() < deadline and second is None and driver.poll() is None:
        if (a / "mlflow.db").exists():
            try:
                kids = children(c, "objs")
            except Exception:
                kids = []
            done = [r for r in kids if r.info.status == "FINISHED"]
            running = [r for r in kids if r.info.status == "RUNNING"]
            if done and running:
                h = running[0].data.tags["gatesweep.config_hash"]
                if any(k.endswith("/COMPLETE") for k in s3.object_keys("test-bucket", f"runs/sweeps/objs/trials/{h}/checkpoints/")):
                    second = running[0]
        time.sleep(0.5)
    log_a = (a / "driver.log").read_text()
    assert second is not None, log_a
    assert "took over the lock of sweep 'objs'" in log_a and "no longer runs" in log_a
    # the machine is lost: the driver and its whole Ray, at once
    state = json.loads(s3.client().get_object(Bucket="test-bucket", Key="runs/sweeps/objs/state.json")["Body"].read())
    from orchestrator.ray.cluster import kill_processes, session_processes

    procs = [psutil.Process(driver.pid), *session_processes(state)]
    for p in procs:
        p.suspend()
    driver.kill()
    driver.wait(timeout=30)
    kill_processes(procs)
    assert not (a / "runs").exists(), "nothing under a local ./runs"
    keys = s3.object_keys("test-bucket", "runs/sweeps/objs/")
    for key in ("state.json", "sweep.yaml", "driver.lock"):
        assert f"runs/sweeps/objs/{key}" in keys
    first = next(r for r in children(c, "objs") if r.info.status == "FINISHED")
    h1 = first.data.tags["gatesweep.config_hash"]
    for key in ("run.json", "model.pt", "artifacts/config.yaml", "artifacts/loss_curve.png", "checkpoints/step400/COMPLETE"):
        assert f"runs/sweeps/objs/trials/{h1}/{key}" in keys, keys
    assert first.data.tags["gatesweep.run_dir"] == f"{RUNS}/sweeps/objs/trials/{h1}"
    # ... resumed on another machine: another working folder, another scratch, no local state
    env_b = {"GATESWEEP_SCRATCH": str(b / "scratch"), "RAY_TMPDIR": str(ray_tmp), "TMPDIR": str(ray_tmp)}
    out = gatesweep("resume", "objs", "--runs-dir", RUNS, "--tracking-uri", uri, cwd=b, env={**env_b, "GATESWEEP_LOCK_STALE_S": "3"})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 already finished, 1 to run" in out.stdout, out.stdout
    assert "took over the lock" in out.stdout, "the killed driver's lock went stale"
    kids = children(c, "objs")
    assert len(kids) == 2 and all(r.info.status == "FINISHED" for r in kids)
    run = c.get_run(second.info.run_id)
    assert run.info.status == "FINISHED" and int(run.data.tags["gatesweep.resumed_from_step"]) >= 20
    assert steps(c, run.info.run_id) == list(range(50, 401, 50)), "every point once"
    assert c.get_run(first.info.run_id).info.end_time == first.info.end_time, "the finished trial was not rerun"
    assert list((b / "scratch").glob("sweeps/objs/trials/*/checkpoints/step*/COMPLETE")), "resumed in machine b's scratch"
    keys = s3.object_keys("test-bucket", "runs/sweeps/objs/")
    h2 = run.data.tags["gatesweep.config_hash"]
    for key in ("report/report.html", "sweep.log", f"trials/{h2}/model.pt", f"trials/{h2}/run.json"):
        assert f"runs/sweeps/objs/{key}" in keys, keys
    assert "runs/sweeps/objs/driver.lock" not in keys, "released at the end"
    assert not (b / "runs").exists()
    # the secret: nowhere
    no_secret_in(log_a, out.stdout, out.stderr)
    for r in runs_of(c, "objs"):
        no_secret_in(json.dumps(r.data.params), json.dumps(r.data.tags))
    for key in keys:
        if key.endswith((".json", ".yaml", ".log", ".html")):
            no_secret_in(s3.client().get_object(Bucket="test-bucket", Key=key)["Body"].read().decode(errors="replace"))
    assert no_secret_under(ray_tmp) > 10, "Ray's session logs were read"
    assert no_secret_under(a / "scratch") and no_secret_under(b / "scratch")


# ---- `gatesweep train --runs-dir s3://...` ---------------------------------------------------------
@pytest.mark.slow
def test_train_on_s3_then_resume_from_another_machine(tmp_path, s3):

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    uri = sqlite_uri(tmp_path)
    args = ["train", str(EXAMPLE), *FAST, "--runs-dir", RUNS, "--tracking-uri", uri]
    out = gatesweep(*args, cwd=a, env={"GATESWEEP_SCRATCH": str(a / "scratch")})
    assert out.returncode == 0, out.stderr
    keys = s3.object_keys("test-bucket", "runs/")
    (trial,) = {k.split("/")[1] for k in keys}
    for key in ("run.json", "model.pt", "checkpoints/step12/COMPLETE", "artifacts/config.yaml"):
        assert f"runs/{trial}/{key}" in keys, keys
    again = gatesweep(*args, cwd=b, env={"GATESWEEP_SCRATCH": str(b / "scratch")})
    assert again.returncode == 2 and f"{RUNS}/{trial}" in again.stderr and "--resume" in again.stderr, again.stderr
    resumed = gatesweep(*args, "--resume", "--quiet", cwd=b, env={"GATESWEEP_SCRATCH": str(b / "scratch")})
    assert resumed.returncode == 0, resumed.stderr
    run_id = out.stdout.split("MLflow run ")[1].split()[0]
    assert run_id in resumed.stdout and "resumed from step 12" in resumed.stdout, resumed.stdout
    assert not (a / "runs").exists() and not (b / "runs").exists()
    # the run id is enough on a third machine: its weights come down from the bucket
    c = tmp_path / "c"
    c.mkdir()
    probed = gatesweep("probe", run_id, "--data", "bigram-backcopy", "--sequences", "2", "--seq-len", "32", "--tracking-uri", uri,
                       cwd=c, env={"GATESWEEP_SCRATCH": str(c / "scratch")})  # fmt: skip
    assert probed.returncode == 0 and "sink ratio" in probed.stdout.lower(), probed.stdout + probed.stderr
    assert list((c / "scratch").rglob("model.pt")), "the weights were downloaded into c's scratch"
    no_secret_in(out.stdout, out.stderr, resumed.stdout, resumed.stderr, probed.stdout, probed.stderr)


def test_a_checkpoint_upload_that_keeps_failing_is_skipped_for_the_next_one(tmp_path, s3, monkeypatch):
    """The store unreachable past the retry budget: a warning, training goes on (no exception),
    and the next checkpoint is uploaded once the store answers again."""
    from orchestrator.trial import checkpoint as ckpt
    from orchestrator.trial.callbacks.checkpoint import Checkpointer

    remote = Location.parse(f"{RUNS}/sweeps/up/trials/abc")
    said: list[str] = []
    cb = Checkpointer(tmp_path, resume=False, keep=2, config_hash="abc", remote=remote, say=said.append)
    for step in (10, 20):
        folder = ckpt.checkpoint_dir(tmp_path) / ckpt.tag(step)
        folder.mkdir(parents=True)
        (folder / "model_states.pt").write_bytes(os.urandom(1000))
        ckpt.mark_complete(tmp_path, step)
    monkeypatch.setenv("GATESWEEP_STORE_RETRY_S", "2")
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")  # nothing answers
    t0 = time.time()
    cb._upload(10)
    assert time.time() - t0 < 30
    assert cb.upload_failed == [10] and cb.uploaded == []
    assert "checkpoint step10 could not be uploaded" in said[-1] and "the next checkpoint is uploaded instead" in said[-1]
    no_secret_in(*said)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    cb._upload(20)
    assert cb.uploaded == [20]
    keys = s3.object_keys("test-bucket", "runs/sweeps/up/")
    assert "runs/sweeps/up/trials/abc/checkpoints/step20/COMPLETE" in keys and not any("step10" in k for k in keys)
    assert ckpt.download_latest(remote, tmp_path / "elsewhere") == "step20"
