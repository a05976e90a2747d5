"""Fixtures of the orchestrator tests that start real Ray clusters."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time

import psutil
import pytest

from orchestrator.ray.cluster import kill_processes, ray_processes

TAG = "GATESWEEP_TEST_TAG"


def _env() -> dict:
    """Every process a test starts (and every Ray process those start) inherits this tag, so the
    test finds exactly its own processes, never another program's Ray."""
    return {**os.environ, TAG: f"{os.getpid()}-{time.time_ns()}"}


def _tagged(tag: str) -> list:
    out = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(TAG) == tag and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out


def _orphaned_ray(since: float) -> list:
    """Ray processes started since `since` and orphaned (parent init): Ray's agents rename
    themselves, which can overwrite the environment `_tagged` reads."""
    out = []
    for proc in psutil.process_iter(["name", "ppid", "create_time"]):
        info = proc.info
        if (info["name"] or "").startswith("ray::") and info["ppid"] == 1 and (info["create_time"] or 0) >= since:
            out.append(proc)
    return out


@pytest.fixture
def no_ray_left_behind(monkeypatch):
    """Tag this test's processes; afterwards none of them may still run (Ray stopped by pid)."""
    env = _env()
    monkeypatch.setenv(TAG, env[TAG])
    started = time.time()
    yield
    left = []
    for _ in range(30):  # Ray's workers and agents take a moment to exit after shutdown
        left = [p for p in _tagged(env[TAG]) + _orphaned_ray(started) if p.pid != os.getpid()]
        if not left:
            break
        time.sleep(0.5)
    names = [(p.pid, p.name()) for p in left if p.is_running()]
    kill_processes(left)
    assert not names, f"processes left behind: {names}"


#: `ray start` with the head guard installed: no cloud-metadata probe from the head (orchestrator/runtime/netpolicy.py)
RAY_CLI = [sys.executable, "-m", "orchestrator.runtime.ray_cli"]


@contextlib.contextmanager
def loopback_cluster(
    port_base: int, *workers: str, head_args: tuple[str, ...] = ("--num-cpus", "1"), node_env: dict[str, dict[str, str]] | None = None
):
    """A Ray head on the loopback alias 127.0.0.2 (Ray rewrites 127.0.0.1 to the machine's address,
    not 127.0.0.2/3), plus one worker node per address in `workers`; yields the head's address and
    stops every process of the cluster by pid afterwards. `node_env`: extra variables of each
    node's `ray start` by its address (e.g. its own GATESWEEP_SCRATCH and TMPDIR)."""
    temp = tempfile.mkdtemp(prefix="gsr", dir="/tmp")  # short: Ray's socket paths have a length limit
    port = port_base + os.getpid() % 500
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token"}

    def ray(*args: str) -> None:
        address = args[args.index("--node-ip-address") + 1]
        node = {**env, **(node_env or {}).get(address, {})}
        subprocess.run([*RAY_CLI, *args, "--disable-usage-stats"], check=True, env=node, capture_output=True, timeout=120)

    try:
        ray(
            "start",
            "--head",
            "--node-ip-address",
            "127.0.0.2",
            "--port",
            str(port),
            "--include-dashboard",
            "false",
            "--temp-dir",
            temp,
            *head_args,
        )
        for address in workers:
            ray("start", "--address", f"127.0.0.2:{port}", "--node-ip-address", address, "--num-cpus", "1")
        yield f"127.0.0.2:{port}"
    finally:
        kill_processes(ray_processes(temp))
        assert not ray_processes(temp)


@pytest.fixture(scope="session")
def shared_ray():
    """One Ray cluster for the session (a head on 127.0.0.2 with this machine's cores, usage
    stats off, stopped by pid at the end), whose address sweeps join with `--address` where the
    test is about the sweep, not about Ray's own start and stop: each local start costs seconds.
    Every sweep is its own Ray job, so no worker or actor outlives the sweep that started it."""
    cores = str(len(os.sched_getaffinity(0)))
    with loopback_cluster(8100, head_args=("--num-cpus", cores)) as address:
        yield address
