"""Ray clusters of the tests: `loopback_cluster`, a head on 127.0.0.1 (on 127.0.0.2 with worker
nodes on 127.0.0.3...) started with `ray start` and stopped by pid; the `shared_ray` fixture
(tests/conftest.py) is one of them for the whole session."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile

from orchestrator.ray.cluster import kill_processes, ray_processes
from orchestrator.runtime.netpolicy import is_loopback
from tests.services.ports import free_port

#: `ray start` with the head guard installed: no cloud-metadata probe from the head (orchestrator/runtime/netpolicy.py)
RAY_CLI = [sys.executable, "-m", "orchestrator.runtime.ray_cli"]


@contextlib.contextmanager
def loopback_cluster(*workers: str, head_args: tuple[str, ...] = ("--num-cpus", "1"), node_env: dict[str, dict[str, str]] | None = None):
    """A Ray cluster on loopback, started with `ray start` and stopped by pid; yields the head's
    address. Alone, the head is on 127.0.0.1 with RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, as
    gatesweep's own local Ray: its servers listen on 127.0.0.1 only (`listeners_beyond_loopback`
    is empty). With worker nodes (`workers`: their addresses, 127.0.0.3...), every node needs an
    address of its own, so the head is on the alias 127.0.0.2; Ray's servers on a node whose
    address is not 127.0.0.1 listen on all interfaces (nothing connects to them but loopback).
    `node_env`: extra variables of each node's `ray start` by its address (e.g. its own
    GATESWEEP_SCRATCH and TMPDIR)."""
    temp = tempfile.mkdtemp(prefix="gsr", dir="/tmp")  # short: Ray's socket paths have a length limit
    head = "127.0.0.2" if workers else "127.0.0.1"
    port = free_port(head)
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token"}
    if head == "127.0.0.1":  # else Ray rewrites 127.0.0.1 to the machine's network address (orchestrator/ray/cluster.py)
        env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

    def ray(*args: str) -> None:
        address = args[args.index("--node-ip-address") + 1]
        node = {**env, **(node_env or {}).get(address, {})}
        # no log monitor: it ships worker logs to drivers, and gatesweep's drivers take none (log_to_driver=False);
        # it costs an idle node 0.7 CPU-s a minute, and the session's shared heads live the whole run
        quiet = ["--include-log-monitor", "false"] if args[0] == "start" else []
        done = subprocess.run([*RAY_CLI, *args, *quiet, "--disable-usage-stats"], env=node, capture_output=True, text=True, timeout=120)
        if done.returncode:  # Ray's own last lines say why (a port taken, no auth token, ...)
            raise RuntimeError(f"ray {' '.join(args[:2])} on {address} exited {done.returncode}:\n{done.stderr[-3000:]}")

    try:
        ray(
            "start",
            "--head",
            "--node-ip-address",
            head,
            "--port",
            str(port),
            "--include-dashboard",
            "false",
            "--temp-dir",
            temp,
            *head_args,
        )
        for address in workers:
            ray("start", "--address", f"{head}:{port}", "--node-ip-address", address, "--num-cpus", "1")
        yield f"{head}:{port}"
    finally:
        kill_processes(ray_processes(temp))
        assert not ray_processes(temp)


def listeners_beyond_loopback(address: str) -> list[tuple[str, str]]:
    """(process name, listening address) of each listener of the cluster at `address` (its GCS
    found by port, the rest by its session folder) on an address other than loopback."""
    import psutil

    port = int(address.rsplit(":", 1)[1])
    listening = [c for c in psutil.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
    gcs = next(psutil.Process(c.pid) for c in listening if c.laddr.port == port and c.pid)
    log_dir = next(a.split("=", 1)[1] for a in gcs.cmdline() if a.startswith("--log_dir="))
    temp = log_dir.split("/session_")[0]
    pids = {p.pid: p.name() for p in ray_processes(temp)}
    return [(pids[c.pid], f"{c.laddr.ip}:{c.laddr.port}") for c in listening if c.pid in pids and not is_loopback(c.laddr.ip)]
