"""Ray clusters of the tests: `loopback_cluster`, a head on 127.0.0.2 (and worker nodes on
127.0.0.3...) started with `ray start` and stopped by pid; the `shared_ray` fixture
(tests/conftest.py) is one of them for the whole session."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile

from orchestrator.ray.cluster import kill_processes, ray_processes

#: `ray start` with the head guard installed: no cloud-metadata probe from the head (orchestrator/runtime/netpolicy.py)
RAY_CLI = [sys.executable, "-m", "orchestrator.runtime.ray_cli"]


def free_port(host: str) -> int:
    """A port nothing listens on at `host` now, as the kernel picks one (two pytest workers
    starting clusters at once do not meet on it)."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def loopback_cluster(*workers: str, head_args: tuple[str, ...] = ("--num-cpus", "1"), node_env: dict[str, dict[str, str]] | None = None):
    """A Ray head on the loopback alias 127.0.0.2 (Ray rewrites 127.0.0.1 to the machine's address,
    not 127.0.0.2/3), plus one worker node per address in `workers`; yields the head's address and
    stops every process of the cluster by pid afterwards. `node_env`: extra variables of each
    node's `ray start` by its address (e.g. its own GATESWEEP_SCRATCH and TMPDIR)."""
    temp = tempfile.mkdtemp(prefix="gsr", dir="/tmp")  # short: Ray's socket paths have a length limit
    port = free_port("127.0.0.2")
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
