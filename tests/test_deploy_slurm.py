"""deploy/slurm/gatesweep.sbatch on a real one-node Slurm (slurmctld, slurmd, munged from Debian's
slurm-wlm and munge, configured in a temporary folder): the job starts Ray with the helper,
runs the sweep, is warned before a preemption (SIGUSR1 to the batch shell) and requeues itself,
is requeued by Slurm (`scontrol requeue`: SIGTERM to every process of the job), and each next run
resumes the sweep: finished trials are not rerun, interrupted ones continue from their newest
whole checkpoint. Every daemon and Ray process is stopped by pid."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from orchestrator.ray.cluster import kill_processes, ray_processes
from orchestrator.runtime.netpolicy import is_loopback
from tests.services.ports import free_port

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "deploy" / "slurm" / "gatesweep.sbatch"
HELPER = REPO / "deploy" / "slurm" / "ray_on_slurm.sh"
STEPS, EVERY = 600, 30
"""Long enough that the victim trial has hundreds of steps (seconds) to go at each signal: the
test looks for its checkpoint, then Slurm takes a moment to signal the job."""


def sweep_file(tmp_path: Path) -> Path:
    doc = {
        "name": "slurmy",
        "base": {
            "model": {"size": "bigram-1l"},
            "data": {"seq_len": 32},
            "train": {
                "steps": STEPS,
                "batch_size": 8,
                "warmup_steps": 2,
                "eval_every": STEPS // 2,
                "log_every": 10,
                "checkpoint_every": EVERY,
            },
            "eval": {"batches": 1, "batch_size": 8, "probe_sequences": 4},
        },
        "grid": {"model.gate.position": ["none", "G1"]},
        "resources": {"max_concurrent": 1},
        "tracking": {"experiment": "e"},
    }
    path = tmp_path / "slurmy.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def children(uri: str):
    from orchestrator.tracking import client

    c = client(uri)
    exp = c.get_experiment_by_name("e")
    if exp is None:
        return c, []
    runs = c.search_runs([exp.experiment_id], filter_string="tags.`gatesweep.sweep` = 'slurmy'", max_results=100)
    return c, [r for r in runs if r.data.tags.get("gatesweep.kind") != "sweep"]


def newest_checkpoints(runs: Path) -> dict[str, int]:
    """run id -> step of its newest checkpoint marked whole."""
    out = {}
    for run_json in runs.glob("sweeps/slurmy/trials/*/run.json"):
        marks = [int(p.parent.name.removeprefix("step")) for p in run_json.parent.glob("checkpoints/step*/COMPLETE")]
        if marks:
            out[json.loads(run_json.read_text())["run_id"]] = max(marks)
    return out


def test_the_batch_script_runs_a_sweep_and_resumes_it_after_a_warned_and_a_forced_requeue(tmp_path, slurm, tracking_uri):
    runs, ray_temp = tmp_path / "runs", f"/tmp/gsslurm{os.getpid()}"
    env = {
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "MLFLOW_TRACKING_URI": tracking_uri,
        "GATESWEEP_RUNS_DIR": str(runs),
        "GATESWEEP_RAY_TEMP": ray_temp,
        "GATESWEEP_RAY_PORT": str(free_port()),
        "GATESWEEP_PYTHON": sys.executable,
    }
    log = tmp_path / "job.out"
    job = slurm.sbatch(f"--output={log}", f"--chdir={tmp_path}", "--cpus-per-task=2", str(SCRIPT), str(sweep_file(tmp_path)), env=env)

    def text() -> str:
        return log.read_text(errors="replace") if log.exists() else ""

    def until(what: str, ready, timeout: float = 240):
        deadline = time.time() + timeout
        while time.time() < deadline:
            got = ready()
            if got:
                return got
            state = slurm.job(job).get("JobState")
            assert state not in ("FAILED", "CANCELLED", "COMPLETED", "TIMEOUT"), f"{what}: job {state}\n{text()}\n{slurm.logs()}"
            time.sleep(0.2)
        raise AssertionError(f"{what}: not within {timeout} s\n{text()}")

    def trials() -> tuple[list[str], dict[str, int]]:
        """From the runs folder (cheap enough to poll): the run ids of finished trials (final
        weights written), and of unfinished ones with a whole checkpoint, with its step."""
        done, ckpt = [], {}
        for run_json in runs.glob("sweeps/slurmy/trials/*/run.json"):
            try:
                run_id = json.loads(run_json.read_text())["run_id"]
            except (OSError, ValueError, KeyError):
                continue
            if (run_json.parent / "model.pt").exists():
                done.append(run_id)
            elif run_id in (steps := newest_checkpoints(runs)):
                ckpt[run_id] = steps[run_id]
        return done, ckpt

    def a_finished_trial_and_a_checkpointed_one():
        done, ckpt = trials()
        return (done, next(iter(ckpt))) if done and ckpt else None

    def release() -> float:
        """Seconds Slurm would keep the requeued job pending (its EligibleTime after the requeue);
        the test lets it start now instead."""
        # slurmd refuses a credential made in the second its job's last one was revoked ("Job
        # credential revoked": its times have 1 s resolution), which is why Slurm holds the job
        time.sleep(2)
        fields = slurm.job(job)
        eligible = (
            time.mktime(time.strptime(fields["EligibleTime"], "%Y-%m-%dT%H:%M:%S"))
            if fields.get("EligibleTime", "")[:1].isdigit()
            else time.time()
        )
        slurm.run("scontrol", "update", f"JobId={job}", "StartTime=now", check=False)
        return eligible - time.time()

    def listeners_beyond_loopback() -> list:
        """Listening sockets of Slurm's daemons and everything under them (the job: Ray,
        gatesweep, the trials) on an address other than loopback."""
        procs = []
        for p in slurm.procs.values():
            try:
                procs += [psutil.Process(p.pid), *psutil.Process(p.pid).children(recursive=True)]
            except psutil.NoSuchProcess:
                pass
        pids = {p.pid for p in procs} | {p.pid for p in ray_processes(ray_temp)}
        listening = [(c.pid, c.laddr) for c in psutil.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN and c.pid in pids]
        assert any(pid == slurm.procs["slurmctld"].pid for pid, _ in listening), "the check sees slurmctld's port"
        return [(pid, a) for pid, a in listening if not is_loopback(a.ip)]

    try:
        t0 = time.time()
        # 1. the warning before a preemption: SIGUSR1 to the batch shell only (what --signal=B:USR1@300 sends)
        done, victim = until("a trial finished and the next one checkpointed", a_finished_trial_and_a_checkpointed_one)
        beyond = listeners_beyond_loopback()
        assert not beyond, f"listening beyond loopback: {[(pid, psutil.Process(pid).name(), str(a)) for pid, a in beyond]}"
        slurm.run("scancel", "--batch", "--signal=USR1", str(job))
        t_warned = time.time()
        until("the job requeued itself", lambda: slurm.job(job).get("Restarts") == "1")
        t_requeued = time.time()
        until("the job pending again", lambda: slurm.job(job).get("JobState") == "PENDING")
        held = [release()]
        assert "SIGUSR1: stopping gatesweep" in text() and "requeueing job" in text(), text()
        assert "interrupted: `gatesweep resume slurmy` continues" in text(), text()
        assert not ray_processes(ray_temp), "the stopped run left Ray processes"
        ckpt1 = newest_checkpoints(runs)[victim]

        # 2. a forced requeue: Slurm sends SIGTERM to every process of the job (gatesweep and Ray alike)
        until("the requeued job runs again", lambda: slurm.job(job).get("JobState") == "RUNNING")
        t_back1 = time.time()
        until("the resumed trial checkpointed again", lambda: newest_checkpoints(runs).get(victim, 0) > ckpt1)
        slurm.run("scontrol", "requeue", str(job))
        t_forced = time.time()
        until("Slurm requeued the job", lambda: slurm.job(job).get("Restarts") == "2")
        until("every process of the job ended", lambda: slurm.job(job).get("JobState") == "PENDING")
        t_ended = time.time()
        ckpt2 = newest_checkpoints(runs)[victim]
        held.append(release())
        until("the job runs a third time", lambda: slurm.job(job).get("JobState") == "RUNNING")
        t_back2 = time.time()
        final = slurm.wait(job, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), timeout=300)
        t_end = time.time()
    finally:
        subprocess.run(["scancel", str(job)], env=slurm.env(), capture_output=True)
        left = ray_processes(ray_temp)
        kill_processes(left)
    out = text()
    assert final["JobState"] == "COMPLETED" and final["ExitCode"] == "0:0", f"{final}\n{out}"
    assert not left, f"Ray processes left behind: {[p.pid for p in left]}"
    for restart, command in ((0, "gatesweep run "), (1, "gatesweep resume slurmy"), (2, "gatesweep resume slurmy")):
        assert f"(restart {restart}) on gsnode: {command}" in out, out
    c, kids = children(tracking_uri)
    assert len(kids) == 2 and all(r.info.status == "FINISHED" for r in kids), [(r.info.run_name, r.info.status) for r in kids]
    history = {r.info.run_id: c.get_metric_history(r.info.run_id, "train/loss") for r in kids}
    for r in kids:  # every point exactly once across the job's three runs
        assert [m.step for m in history[r.info.run_id]] == list(range(10, STEPS + 1, 10)), r.info.run_name
    (first,) = done  # finished before the first requeue, never rerun
    assert "gatesweep.resumed_from_step" not in c.get_run(first).data.tags
    assert max(m.timestamp for m in history[first]) / 1000 < t_requeued
    # the interrupted trial resumed twice, each time from its newest whole checkpoint; the tag keeps the last
    resumed = int(c.get_run(victim).data.tags["gatesweep.resumed_from_step"])
    assert resumed == ckpt2 > ckpt1 >= EVERY, (resumed, ckpt1, ckpt2)
    points = history[victim]
    reached1 = max(m.step for m in points if m.timestamp / 1000 < t_back1)  # logged before the second run began
    reached2 = max(m.step for m in points if m.timestamp / 1000 < t_back2)
    redone1, redone2 = reached1 - ckpt1, reached2 - ckpt2
    assert 0 <= redone1 < EVERY + 10 and 0 <= redone2 < EVERY + 10, (reached1, ckpt1, reached2, ckpt2)
    print(
        f"\nslurm: USR1 to requeued {t_requeued - t_warned:.1f} s, running again {t_back1 - t_requeued:.1f} s later "
        f"(Slurm would hold it {held[0]:.0f} s, {held[1]:.0f} s after the forced requeue); "
        f"scontrol requeue to the job's end {t_ended - t_forced:.1f} s (gatesweep stopped before Slurm's SIGKILL: "
        f"{out.count('gatesweep exited with status 130') == 2}), to running again {t_back2 - t_forced:.1f} s; steps redone: {redone1} after the warning "
        f"(checkpoint {ckpt1}), {redone2} after the forced requeue (checkpoint {ckpt2}); whole job {t_end - t0:.0f} s"
    )


@pytest.mark.parametrize(
    "args, says",
    [
        ((), "usage: sbatch gatesweep.sbatch SWEEP.yaml"),
        (("missing.yaml",), "missing.yaml: no such sweep file"),
    ],
)
def test_user_mistakes_are_one_line_and_status_2_before_anything_starts(tmp_path, args, says):
    out = subprocess.run(
        ["bash", str(SCRIPT), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "GATESWEEP_SLURM_DIR": str(HELPER.parent), "GATESWEEP_RUNS_DIR": str(tmp_path / "runs")},
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert says in out.stderr and len(out.stderr.strip().splitlines()) == 1 and not out.stdout, out.stderr
    assert list(tmp_path.iterdir()) == [], "nothing written"


def test_the_helper_missing_beside_the_script_is_named(tmp_path):
    (tmp_path / "s.yaml").write_text("name: s\n")
    out = subprocess.run(
        ["bash", str(SCRIPT), "s.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=60,
        env={**os.environ, "GATESWEEP_SLURM_DIR": str(tmp_path / "nowhere")},
    )  # fmt: skip
    assert out.returncode == 2 and "nowhere/ray_on_slurm.sh: missing (set GATESWEEP_SLURM_DIR" in out.stderr, out.stderr


def test_a_broken_sweep_file_fails_the_job_with_status_2_before_ray_starts(tmp_path, slurm):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nbase:\n  train: {steps: -3}\n")
    log = tmp_path / "job.out"
    env = {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "GATESWEEP_RUNS_DIR": str(tmp_path / "runs")}
    job = slurm.sbatch(f"--output={log}", f"--chdir={tmp_path}", str(SCRIPT), str(bad), env=env)
    final = slurm.wait(job, ("COMPLETED", "FAILED", "CANCELLED"), timeout=120)
    text = log.read_text()
    assert final["JobState"] == "FAILED" and final["ExitCode"] == "2:0", (final, text)
    assert "base.train.steps: got -3; allowed: 1..100,000,000" in text and "Traceback" not in text, text
    assert "Ray head" not in text and not (tmp_path / "runs").exists(), text


@pytest.fixture
def two_node_slurm(tmp_path_factory):
    """Two Slurm nodes on one machine (two slurmd on the loopback aliases 127.0.0.2 and .3), one CPU each."""
    from tests.services.slurm import Slurm, missing

    if why := missing():
        pytest.skip(why)
    if os.environ.get("GATESWEEP_TEST_SLURM_TWO_NODES") != "1":
        # two slurmd on one machine cannot be held to loopback (with NoInAddrAny both bind to what
        # the machine's name resolves to, not to their NodeAddr), so they listen on every interface
        pytest.skip("two slurmd on one machine listen on 0.0.0.0; GATESWEEP_TEST_SLURM_TWO_NODES=1 runs it")
    cluster = Slurm(tmp_path_factory.mktemp("slurm2"), cpus=1, nodes=2).start()
    yield cluster
    cluster.stop()


def test_a_two_node_job_starts_a_ray_worker_on_the_second_node_and_uses_both(tmp_path, two_node_slurm, tracking_uri):
    doc = yaml.safe_load(sweep_file(tmp_path).read_text())
    doc["base"]["train"].update(steps=60, eval_every=0, checkpoint_every=0)
    doc["resources"] = {"max_concurrent": 0, "cpus_per_worker": 1}
    (tmp_path / "slurmy.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    ray_temp = f"/tmp/gsslurm2{os.getpid()}"
    env = {
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "MLFLOW_TRACKING_URI": tracking_uri,
        "GATESWEEP_RUNS_DIR": str(tmp_path / "runs"),
        "GATESWEEP_RAY_TEMP": ray_temp,
        "GATESWEEP_RAY_PORT": str(free_port()),
    }
    log = tmp_path / "job.out"
    job = two_node_slurm.sbatch(f"--output={log}", f"--chdir={tmp_path}", "--nodes=2", str(SCRIPT), str(tmp_path / "slurmy.yaml"), env=env)
    try:
        final = two_node_slurm.wait(job, ("COMPLETED", "FAILED", "CANCELLED"), timeout=300)
    finally:
        subprocess.run(["scancel", str(job)], env=two_node_slurm.env(), capture_output=True)
        left = ray_processes(ray_temp)
        kill_processes(left)
    text = log.read_text()
    assert final["JobState"] == "COMPLETED" and final["ExitCode"] == "0:0", (final, text)
    assert "Ray head on gsnode1 (127.0.0.2:" in text and "2 node(s): gsnode1 gsnode2" in text, text
    assert "2 Ray node(s) alive" in text, text
    assert not left, f"Ray processes left behind: {[p.pid for p in left]}"
    c, kids = children(tracking_uri)
    assert len(kids) == 2 and all(r.info.status == "FINISHED" for r in kids)
    assert len({r.data.tags["gatesweep.node_id"] for r in kids}) == 2, "one trial on each Slurm node"


def test_a_taken_ray_port_fails_the_job_at_once_naming_it(tmp_path, slurm):
    (tmp_path / "s.yaml").write_text(sweep_file(tmp_path).read_text())
    log = tmp_path / "job.out"
    with socket.socket() as taken:  # another program holds the head's port
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            "GATESWEEP_RUNS_DIR": str(tmp_path / "runs"),
            "GATESWEEP_RAY_PORT": str(port),
            "GATESWEEP_RAY_TEMP": f"/tmp/gsslurm3{os.getpid()}",
        }
        started = time.time()
        job = slurm.sbatch(f"--output={log}", f"--chdir={tmp_path}", str(SCRIPT), str(tmp_path / "s.yaml"), env=env)
        final = slurm.wait(job, ("COMPLETED", "FAILED", "CANCELLED"), timeout=150)
    text = log.read_text()
    assert final["JobState"] == "FAILED" and final["ExitCode"] == "1:0", (final, text)
    assert f"port {port} on 127.0.0.1 (the Ray head's) is taken by another program; set GATESWEEP_RAY_PORT" in text, text
    assert "Ray did not start" in text and "Traceback" not in text, text
    assert time.time() - started < 30, "not Ray's own retries (40 s) nor the start-up timeout (180 s)"
    assert not (tmp_path / "runs").exists() and not ray_processes(f"/tmp/gsslurm3{os.getpid()}")
