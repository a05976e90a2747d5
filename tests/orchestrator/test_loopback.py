"""Loopback only (issue 12, item 5): a real sweep on a local Ray and a real `gatesweep train`, with
every process they start watched while they run. Nothing may listen on a non-loopback address
(0.0.0.0, :: and real interface addresses count as non-loopback) or connect to one, Ray's API
server (whose usage-stats module probes 169.254.169.254 / metadata.google.internal even with
usage stats disabled) must not run, and every process must carry the telemetry switches.

The children get an environment without the switches, so what is checked is what gatesweep sets
itself. A process's /proc/PID/environ is the environment it was started with, so the driver's
own (set at `import orchestrator`) is checked by `test_import_sets_telemetry_defaults`."""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import yaml

from orchestrator.ray.cluster import kill_processes, ray_processes
from orchestrator.runtime.netpolicy import TELEMETRY_ENV, is_loopback
from orchestrator.runtime.ray_cli import NODE_DEFAULTS
from tests.support.ray import listeners_beyond_loopback

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "bigram_g1.yaml"
SWITCHES = {"RAY_USAGE_STATS_ENABLED": "0", "MLFLOW_DISABLE_TELEMETRY": "true"}
SWEEP = {
    "name": "loopback",
    "base": {
        "model": {"size": "bigram-1l"},
        "data": {"source": "bigram-backcopy", "seq_len": 32},
        "train": {"steps": 20, "batch_size": 8, "warmup_steps": 2, "eval_every": 10, "log_every": 5, "checkpoint_every": 10},
        "eval": {"batches": 1, "batch_size": 8, "probe_sequences": 4},
    },
    "grid": {"model.gate.position": ["none", "G1"]},
    "resources": {"cpus_per_worker": 1},
    "tracking": {"experiment": "loopback"},
}
TRAIN_FAST = [
    "--set",
    "train.steps=20",
    "--set",
    "train.eval_every=10",
    "--set",
    "train.log_every=5",
    "--set",
    "train.checkpoint_every=10",
    "--set",
    "data.seq_len=32",
    "--set",
    "eval.batches=1",
    "--set",
    "eval.batch_size=8",
    "--set",
    "eval.probe_sequences=4",
]


def bare_env() -> dict:
    """The test run's environment without the switches gatesweep must set itself."""
    return {k: v for k, v in os.environ.items() if k not in TELEMETRY_ENV}


def _environ(proc: psutil.Process) -> dict | None:
    """A process's start-up environment; None when unreadable or overwritten (Ray's agents
    rename themselves with setproctitle, which can reuse the environment's memory)."""
    try:
        raw = Path(f"/proc/{proc.pid}/environ").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    env = dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)
    return env if "PATH" in env else None


def _env_block(pid: int) -> int | None:
    """Where a process's environment block starts (/proc/PID/stat field 50): it moves on exec."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[47])
    except (OSError, IndexError, ValueError):
        return None


class Watch:
    """Polls a process tree (and the Ray instance named in a sweep's state.json) for inet sockets
    and start-up environments, in a thread, every `interval` seconds until stopped."""

    def __init__(self, root_pid: int, state_file: Path | None = None, interval: float = 0.2, limit_s: float = 300):
        self.root = psutil.Process(root_pid)
        self.state_file, self.interval, self.deadline = state_file, interval, time.monotonic() + limit_s
        self.ray: tuple[str, str | None] | None = None
        self.procs: dict[int, str] = {}  # pid -> latest command line, every process seen
        self.cmdlines: dict[int, list[str]] = {}  # pid -> every command line it showed, in order
        self._handles: dict[int, psutil.Process] = {}
        self._blocks: dict[int, int | None] = {}  # pid -> where its environment block starts
        self.envs: dict[int, dict] = {}  # pid -> start-up environment (all but the root)
        self.sockets: set[tuple] = set()  # (pid, kind, status, local, remote)
        self.polls = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _tree(self) -> list[psutil.Process]:
        found = {self.root.pid: self.root}
        try:
            found.update({p.pid: p for p in self.root.children(recursive=True)})
        except psutil.Error:
            pass
        if self.ray is None and self.state_file is not None and self.polls % 5 == 0:
            try:
                state = json.loads(self.state_file.read_text())
                if state.get("ray_session_dir"):
                    self.ray = (state["ray_session_dir"], state.get("ray_node_id"))
            except (OSError, ValueError):
                pass
        if self.ray is not None and self.polls % 5 == 0:
            found.update({p.pid: p for p in ray_processes(*self.ray)})
        return list(found.values())

    def poll(self) -> None:
        for proc in self._tree():
            try:
                # A child caught between fork and exec still shows its parent's command line and
                # environment: every command line is kept, and the environment is read again after
                # an exec (a new environment block), not after a rename (setproctitle can overwrite it).
                # Until it execs, a child's block is its parent's and shows the parent's start-up
                # environment, not the one it runs with (its parent's current one, which `import
                # orchestrator` changed): it is not read then (a compiler check forked and exec'd
                # between two polls left exactly such a reading behind).
                # The sockets of a zombie are gone, so skipping it loses nothing.
                cmd, block = " ".join(proc.cmdline())[:300], _env_block(proc.pid)
                if not cmd:  # a zombie (exited, not yet reaped) shows no command line
                    continue
                if self.procs.get(proc.pid) != cmd:
                    self.procs[proc.pid] = cmd
                    self.cmdlines.setdefault(proc.pid, []).append(cmd)
                    self._handles.setdefault(proc.pid, proc)
                execed = self._blocks.get(proc.pid, block) != block
                self._blocks[proc.pid] = block
                forked_only = block is not None and block == _env_block(proc.ppid())
                if proc.pid != self.root.pid and not forked_only and (execed or proc.pid not in self.envs):
                    env = _environ(proc)
                    if env is not None:
                        self.envs[proc.pid] = env
                for c in proc.net_connections(kind="inet"):
                    kind = "udp" if c.type == socket.SOCK_DGRAM else "tcp"
                    local = (c.laddr.ip, c.laddr.port) if c.laddr else None
                    remote = (c.raddr.ip, c.raddr.port) if c.raddr else None
                    self.sockets.add((proc.pid, kind, c.status, local, remote))
            except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                continue
        self.polls += 1

    def _loop(self) -> None:
        while not self._stop.is_set() and time.monotonic() < self.deadline:
            self.poll()
            self._stop.wait(self.interval)

    def kill_leftovers(self) -> None:
        """Stop, by pid, every process seen that still runs (Ray's agents outlive a killed raylet)."""
        alive = [p for p in self._handles.values() if p.pid != os.getpid() and p.is_running()]
        kill_processes(alive)

    # ---- verdicts ---------------------------------------------------------------------
    def listeners(self) -> list[tuple]:
        return [s for s in self.sockets if s[4] is None and (s[2] == psutil.CONN_LISTEN or s[1] == "udp")]

    def violations(self) -> list[str]:
        out = []
        for pid, kind, status, local, remote in sorted(self.sockets, key=str):
            where = f"pid {pid} ({self.procs.get(pid, '?')[:120]})"
            if remote is not None and not is_loopback(remote[0]):
                out.append(f"{kind} {status} {local} -> {remote}: connects off loopback, {where}")
            elif remote is None and (status == psutil.CONN_LISTEN or kind == "udp") and local and not is_loopback(local[0]):
                out.append(f"{kind} {status} on {local}: listens off loopback, {where}")
        return out

    def missing_switches(self) -> list[str]:
        out = []
        for pid, env in sorted(self.envs.items()):
            wrong = {k: env.get(k) for k, v in SWITCHES.items() if env.get(k) != v}
            if wrong:
                out.append(f"pid {pid} ({self.procs.get(pid, '?')[:120]}): {wrong}")
        return out


def test_is_loopback():
    for host in ("127.0.0.1", "127.0.0.3", "::1", "::ffff:127.0.0.1", "[::1]", "localhost"):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "::", "192.0.2.2", "169.254.169.254", "::ffff:10.0.0.1", "fe80::1%eth0", "metadata.google.internal"):
        assert not is_loopback(host), host


GUARDED = """
import socket, sys
from tests.support import netguard
netguard.install()
refused = []
for family, address in ((socket.AF_INET, ("192.0.2.2", 80)), (socket.AF_INET6, ("2001:db8::1", 80, 0, 0))):
    with socket.socket(family) as s:
        try:
            s.connect(address)
        except OSError as err:
            refused.append(err.errno)
with socket.socket() as s:
    refused.append(s.connect_ex(("169.254.169.254", 80)))
server = socket.socket(); server.bind(("127.0.0.1", 0)); server.listen()
with socket.socket() as s:
    s.connect(server.getsockname())  # loopback goes through
print(refused, netguard.count())
"""


def test_the_tests_own_processes_connect_to_loopback_only():
    """The guard every test runs under (`tests/support/netguard.py`, installed by the conftest):
    a connection beyond loopback, by `connect` or `connect_ex`, over IPv4 or IPv6, is refused before
    a packet leaves and counted (the autouse fixture fails the test that made it); loopback is not."""
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", GUARDED], cwd=root, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [f"[{errno.ENETUNREACH},", f"{errno.ENETUNREACH},", f"{errno.ENETUNREACH}]", "3"], out.stdout


def test_watch_sees_a_listener_on_all_interfaces():
    """The poller itself: a child listening on 0.0.0.0 is reported, one on 127.0.0.1 is not,
    and a child started without the switches is named."""
    code = (
        "import socket, time\n"
        "a = socket.socket(); a.bind(('0.0.0.0', 0)); a.listen()\n"
        "b = socket.socket(); b.bind(('127.0.0.1', 0)); b.listen()\n"
        "time.sleep(2)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {code!r}])"], env=bare_env()
    )
    with Watch(parent.pid) as w:
        parent.wait(timeout=30)
    bad = w.violations()
    assert len(bad) == 1 and "0.0.0.0" in bad[0], bad
    assert len(w.missing_switches()) == 1, w.missing_switches()


GUARD_STATE = (
    "import sys, ray._private.services as s\n"
    "state = {'patched': getattr(s.start_api_server, '_gatesweep_guard', False),"
    " 'hook': any(type(f).__name__ == '_PatchOnImport' for f in sys.meta_path)}\n"
)
"""Whether Ray's start_api_server is patched and whether the import hook waits for Ray (as `state`)."""


def test_import_sets_telemetry_defaults_and_installs_no_ray_guard():
    """`import orchestrator` (the CLI's modules, too) sets the telemetry switches as defaults and
    leaves Ray alone: no import hook, Ray's private module unpatched once Ray is imported."""
    code = (
        "import os, json, orchestrator.cli.main\n"
        + GUARD_STATE
        + f"print(json.dumps({{'env': {{k: os.environ.get(k) for k in {sorted(TELEMETRY_ENV)!r}}}, **state}}))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=bare_env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"env": TELEMETRY_ENV, "patched": False, "hook": False}
    # a user's own value wins
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**bare_env(), "RAY_USAGE_STATS_ENABLED": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert json.loads(out.stdout)["env"]["RAY_USAGE_STATS_ENABLED"] == "1"


def test_ray_s_command_line_entry_installs_the_guard_before_ray_runs():
    """`python -m orchestrator.runtime.ray_cli ...` (how a cluster's head is started) patches Ray
    before Ray's own CLI runs: here `ray --version`, after which the services module is guarded."""
    code = (
        "import json\n"
        "from orchestrator.runtime import ray_cli\n"
        "try:\n"
        "    ray_cli.main(['--version'])\n"
        "except SystemExit as stop:\n"
        "    assert stop.code in (0, None), stop.code\n" + GUARD_STATE + "print(json.dumps(state))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=bare_env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"patched": True, "hook": True}
    assert out.stdout.startswith("ray, version 2.60.0"), out.stdout


API_SERVER_ARGS = '(False, False, "127.0.0.1", "127.0.0.1:1", "00" * 28, "127.0.0.1", "/tmp", "/tmp", "/tmp")'


def test_the_guard_skips_the_api_server_of_a_head_without_dashboard():
    """Ray 2.60 has no setting that stops the head's cloud-metadata probe (UsageStatsHead.run),
    so the guard answers for the API server of a head without a dashboard, with usage stats
    off, and starts no process; the sweep test below proves no such process runs."""
    code = (
        "import json, orchestrator, ray._private.services as s\n"
        "from orchestrator.runtime import netpolicy\n"
        "netpolicy.require_ray_head_guard()\n"
        f"print(json.dumps(s.start_api_server{API_SERVER_ARGS}))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=bare_env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ["", None]


def test_a_ray_the_guard_was_not_written_for_fails_loudly():
    """With another Ray (simulated: the guard claims to be written for 2.59.0), `import ray` still
    works, but once an entry point has installed the guard, starting a head does not: Ray's own
    start_api_server and gatesweep's local cluster both refuse in one line naming both versions,
    and no Ray process is started."""
    code = (
        "import json, ray, sys\n"
        "import ray._private.services as s\n"
        "from orchestrator.runtime import netpolicy\n"
        "netpolicy.guard_ray_head()  # what an entry point that starts a head does (ray_cli, RayCluster)\n"
        "from orchestrator.ray.cluster import RayCluster\n"
        "from orchestrator.spec.search import ResourcesConfig\n"
        "from orchestrator.core.errors import UserError\n"
        "out = {}\n"
        "try:\n"
        f"    s.start_api_server{API_SERVER_ARGS}\n"
        "except netpolicy.RayGuardError as err:\n"
        "    out['services'] = str(err)\n"
        "try:\n"
        "    RayCluster(ResourcesConfig(), address=None, tracking_uri='sqlite:////tmp/x.db').start()\n"
        "except UserError as err:\n"
        "    out['cluster'] = str(err)\n"
        "out['initialized'] = ray.is_initialized()\n"
        "print(json.dumps(out))"
    )
    prelude = "import orchestrator.runtime.netpolicy as n; n.RAY_GUARDED = '2.59.0'\n"  # before Ray is imported
    out = subprocess.run([sys.executable, "-c", prelude + code], cwd=ROOT, env=bare_env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["initialized"] is False, "no Ray was started"
    assert got["services"] == got["cluster"] and "\n" not in got["cluster"]
    assert "written for Ray 2.59.0, and Ray 2.60.0 is installed" in got["cluster"]
    assert "Install ray[tune,train]==2.59.0" in got["cluster"]


def test_watch_sees_a_child_caught_between_fork_and_exec():
    """A child first seen before its exec (as Ray's gcs_server was, under load) is known by the
    command line and environment it execs into, not only by its parent's."""
    code = (
        "import os, sys, time\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    time.sleep(1.5)\n"
        "    os.execve(sys.executable, [sys.executable, '-c', 'import time; time.sleep(3)', 'execed-child'], {**os.environ, **SW})\n"
        "os.waitpid(pid, 0)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", f"SW = {SWITCHES!r}\n{code}"], env=bare_env())
    with Watch(parent.pid) as w:
        parent.wait(timeout=30)
    child = [pid for pid in w.cmdlines if pid != parent.pid]
    assert len(child) == 1 and len(w.cmdlines[child[0]]) == 2, w.cmdlines
    assert w.cmdlines[child[0]][-1].endswith("execed-child"), w.cmdlines
    assert not w.missing_switches(), w.missing_switches()  # the environment read after the exec


def test_a_child_seen_only_before_its_exec_is_not_judged_by_its_parents_start_up_environment():
    """A forked child that is gone before it execs (as a compiler check under load was) shows its
    parent's start-up environment, which lacks the switches the parent set since: not a verdict."""
    code = (
        "import os, time\n"
        "os.environ.update(SW)  # what import orchestrator does: the parent's start-up block keeps the old values\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    time.sleep(1.0)\n"
        "    os._exit(0)\n"
        "os.waitpid(pid, 0)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", f"SW = {SWITCHES!r}\n{code}"], env=bare_env())
    with Watch(parent.pid) as w:
        parent.wait(timeout=30)
    assert [pid for pid in w.cmdlines if pid != parent.pid], "the child was seen"
    assert not w.missing_switches(), w.missing_switches()


def _report(w: Watch, log: str) -> str:
    socks = "\n".join(f"  {s}" for s in sorted(w.sockets, key=str))
    return f"{w.polls} polls, {len(w.procs)} processes\nsockets:\n{socks}\n--- output ---\n{log[-3000:]}"


def test_sweep_on_local_ray_stays_on_loopback(tmp_path):
    sweep = tmp_path / "loopback.yaml"
    sweep.write_text(yaml.safe_dump(SWEEP, sort_keys=False))
    runs = tmp_path / "runs"
    log = open(tmp_path / "driver.log", "w")
    driver = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "run",
            str(sweep),
            "--runs-dir",
            str(runs),
            "--tracking-uri",
            f"sqlite:///{tmp_path / 'mlflow.db'}",
        ],
        cwd=tmp_path,
        env=bare_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    watch = Watch(driver.pid, state_file=runs / "sweeps" / "loopback" / "state.json")
    try:
        with watch:
            rc = driver.wait(timeout=240)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        if watch.ray is not None:
            kill_processes(ray_processes(*watch.ray))
        watch.kill_leftovers()
        log.close()
    text = (tmp_path / "driver.log").read_text()
    detail = _report(watch, text)
    assert rc == 0, detail
    assert "2 to run" in text, detail
    cmds = [c for seen in watch.cmdlines.values() for c in seen]
    assert any("raylet" in c for c in cmds) and any("gcs_server" in c for c in cmds), detail
    assert watch.listeners(), "the poller saw Ray's listeners:\n" + detail
    assert not any("dashboard/dashboard.py" in c for c in cmds), "Ray's API server ran (it probes cloud metadata):\n" + detail
    assert not watch.violations(), "\n".join(watch.violations()) + "\n" + detail
    assert len(watch.envs) >= 5, detail
    assert not watch.missing_switches(), "\n".join(watch.missing_switches())
    # no Python worker that only ever waited: Ray starts one per CPU for a node's first driver, which
    # no trial runs in (every sweep has a runtime environment), unless told not to (ray_cli.NODE_DEFAULTS)
    raylets = [pid for pid, seen in watch.cmdlines.items() if any("raylet/raylet" in c for c in seen)]
    assert raylets and all(watch.envs.get(pid, {}).get(k) == v for pid in raylets for k, v in NODE_DEFAULTS.items()), detail
    titles = {pid: {c.split()[0] for c in seen if c.startswith("ray::")} for pid, seen in watch.cmdlines.items()}
    assert not [pid for pid, seen in titles.items() if seen == {"ray::IDLE"}], "workers that never ran anything:\n" + detail


def test_train_stays_on_loopback(tmp_path):
    log = open(tmp_path / "train.log", "w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "train",
            str(EXAMPLE),
            *TRAIN_FAST,
            "--runs-dir",
            str(tmp_path / "runs"),
            "--tracking-uri",
            f"sqlite:///{tmp_path / 'mlflow.db'}",
        ],
        cwd=tmp_path,
        env=bare_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        with Watch(proc.pid, limit_s=200) as watch:
            rc = proc.wait(timeout=200)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        watch.kill_leftovers()
        log.close()
    text = (tmp_path / "train.log").read_text()
    detail = _report(watch, text)
    assert rc == 0, detail
    assert "MLflow run" in text, detail
    assert watch.polls >= 10, detail
    # gloo's own device listens (on loopback) while the group lives: the poller saw the group
    assert watch.listeners(), "no listener seen: the poller missed the process group\n" + detail
    assert not watch.violations(), "\n".join(watch.violations()) + "\n" + detail
    assert not watch.missing_switches(), "\n".join(watch.missing_switches())


def test_the_tests_own_ray_cluster_listens_on_loopback_only(shared_ray):
    """The session's Ray (the head every `--address` test joins) binds as gatesweep's own local
    Ray does: GCS, raylet and agents on 127.0.0.1 only (a head on the alias 127.0.0.2 listened on
    all interfaces). Its trial workers, while a sweep ran, were seen on 127.0.0.1 too."""
    assert not listeners_beyond_loopback(shared_ray)
