"""Fixtures of the orchestrator tests that start real Ray clusters."""

from __future__ import annotations

import os
import time

import psutil
import pytest

from orchestrator.ray.cluster import kill_processes

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
