"""A real one-node Slurm on 127.0.0.1 for tests: Debian's `slurm-wlm` (slurmctld + slurmd) and
`munge`, configured in a temporary folder (its own munge key and socket, free ports, state, spool
and log folders there; no cgroups), each daemon in the foreground in its own process group and
stopped by its pid.

`Slurm(root).start()`; `.env()` is what a client (sbatch, scontrol, squeue) needs (SLURM_CONF);
`.sbatch(...)`, `.job(id)` (scontrol's fields of a job), `.wait(id, states)`.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from .ports import free_port

NODE = "gsnode"
DAEMONS = ("/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd")


def missing() -> str | None:
    """Why this machine cannot run the test Slurm (None when it can)."""
    lacking = [d for d in (*DAEMONS, "/usr/bin/sbatch", "/usr/bin/scontrol") if not os.access(d, os.X_OK)]
    if lacking:
        return f"{', '.join(lacking)} missing (apt-get install slurm-wlm munge; .ci/run installs them)"
    if os.geteuid() != 0:
        return "slurmd needs root"
    return None


class Slurm:
    def __init__(self, root: Path, cpus: int = 2, nodes: int = 1):
        """One node (`gsnode` on 127.0.0.1), or `nodes` nodes gsnode1.. on the loopback aliases
        127.0.0.2.. (Ray leaves those alone), each its own slurmd with its own port and spool."""
        self.root, self.cpus = Path(root), cpus
        self.nodes = [NODE] if nodes == 1 else [f"{NODE}{i}" for i in range(1, nodes + 1)]
        self.procs: dict[str, subprocess.Popen] = {}
        self.conf = self.root / "slurm.conf"
        self.socket = self.root / "munge" / "munge.socket.2"

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def _write_config(self) -> None:
        for d in ("munge", "state", "spool", "log", *(f"spool/{n}" for n in self.nodes)):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        os.chmod(self.root / "munge", 0o711)  # the socket's folder: searchable, not listable
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o600)
        r = self.root
        self.conf.write_text(
            "\n".join(
                [
                    "ClusterName=gatesweeptest",
                    "SlurmctldHost=localhost(127.0.0.1)",
                    f"SlurmctldPort={free_port()}",
                    f"SlurmdPort={free_port()}",
                    "SlurmUser=root",
                    "SlurmdUser=root",
                    "AuthType=auth/munge",
                    "CredType=cred/munge",
                    f"AuthInfo=socket={self.socket}",
                    f"StateSaveLocation={r / 'state'}",
                    f"SlurmdSpoolDir={r / 'spool' / '%n'}",
                    f"SlurmctldPidFile={r / 'slurmctld.pid'}",
                    f"SlurmdPidFile={r / 'slurmd-%n.pid'}",
                    f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}",
                    f"SlurmdLogFile={r / 'log' / 'slurmd-%n.log'}",
                    "SlurmctldDebug=info",
                    "SlurmdDebug=info",
                    "ProctrackType=proctrack/linuxproc",
                    "TaskPlugin=task/none",
                    "JobAcctGatherType=jobacct_gather/none",
                    "AccountingStorageType=accounting_storage/none",
                    "JobCompType=jobcomp/none",
                    "SelectType=select/cons_tres",
                    "SelectTypeParameters=CR_CPU",
                    "SchedulerType=sched/builtin",
                    "MpiDefault=none",
                    # listen on the configured addresses (127.0.0.1), not on every interface; a
                    # slurmd of several on one machine binds to what the machine's name resolves
                    # to (127.0.0.1), not to its NodeAddr, so there only slurmctld is held to loopback
                    "CommunicationParameters=" + ("NoCtldInAddrAny,NoInAddrAny" if self.nodes == [NODE] else "NoCtldInAddrAny"),
                    "ReturnToService=2",
                    "JobRequeue=1",
                    "SlurmdParameters=config_overrides",
                    "KillWait=30",
                    "MinJobAge=600",
                    "SchedulerParameters=defer_batch",
                    *self._node_lines(),
                    f"PartitionName=test Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO",
                    "",
                ]
            )
        )

    def _node_lines(self) -> list[str]:
        if self.nodes == [NODE]:
            return [f"NodeName={NODE} NodeAddr=127.0.0.1 NodeHostname=localhost CPUs={self.cpus} RealMemory=1000 State=UNKNOWN"]
        return [
            f"NodeName={n} NodeAddr=127.0.0.{i + 2} NodeHostname=localhost Port={free_port()} CPUs={self.cpus} RealMemory=1000 State=UNKNOWN"
            for i, n in enumerate(self.nodes)
        ]

    def _daemon(self, name: str, cmd: list[str]) -> None:
        log = open(self.root / "log" / f"{name}.out", "ab")
        self.procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=self.env())

    def start(self, timeout: float = 60) -> Slurm:
        self._write_config()
        m = self.root / "munge"
        self._daemon(
            "munged",
            [
                DAEMONS[0],
                "-F",
                "--force",
                f"--key-file={m / 'munge.key'}",
                f"--socket={self.socket}",
                f"--pid-file={m / 'munged.pid'}",
                f"--log-file={self.root / 'log' / 'munged.log'}",
                f"--seed-file={m / 'munged.seed'}",
            ],
        )
        self._until(lambda: self.socket.exists(), timeout, "munged did not create its socket")
        self._daemon("slurmctld", [DAEMONS[1], "-D", "-i", "-f", str(self.conf)])
        self._until(lambda: self._ok("scontrol", "ping"), timeout, "slurmctld did not answer")
        for node in self.nodes:
            self._daemon(f"slurmd-{node}", [DAEMONS[2], "-D", "-N", node, "-f", str(self.conf)])
        self._until(
            lambda: self._out("sinfo", "-h", "-N", "-o", "%T").split() == ["idle"] * len(self.nodes),
            timeout,
            "slurmd did not register its nodes",
        )
        return self

    def _out(self, *cmd: str) -> str:
        r = subprocess.run(cmd, env=self.env(), capture_output=True, text=True, timeout=30)
        return r.stdout if r.returncode == 0 else ""

    def _ok(self, *cmd: str) -> bool:
        return subprocess.run(cmd, env=self.env(), capture_output=True, timeout=30).returncode == 0

    def _until(self, ready, timeout: float, what: str) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            dead = [n for n, p in self.procs.items() if p.poll() is not None]
            if dead:
                break
            if ready():
                return
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"{what}: " + self.logs())

    def logs(self, tail: int = 3000) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-tail:]}" for p in sorted((self.root / "log").glob("*")))

    def run(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, env=self.env(), capture_output=True, text=True, timeout=60, check=check)

    def sbatch(self, *args: str, env: dict[str, str] | None = None) -> int:
        r = subprocess.run(["sbatch", "--parsable", *args], env={**self.env(), **(env or {})}, capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"sbatch failed: {r.stderr}")
        return int(r.stdout.strip().split(";")[0])

    def job(self, job_id: int) -> dict[str, str]:
        """scontrol's fields of the job (JobState, ExitCode, Restarts, ...)."""
        out = self._out("scontrol", "show", "job", "-o", str(job_id))
        fields = {}
        for tok in out.split():
            k, _, v = tok.partition("=")
            fields[k] = v
        return fields

    def wait(self, job_id: int, states: tuple[str, ...], timeout: float) -> dict[str, str]:
        deadline = time.time() + timeout
        job: dict[str, str] = {}
        while time.time() < deadline:
            job = self.job(job_id)
            if job.get("JobState") in states:
                return job
            time.sleep(0.5)
        raise TimeoutError(f"job {job_id} not in {states} after {timeout:.0f} s: {job}")

    def stop(self) -> None:
        """Stop every process of this Slurm by pid: its jobs' (slurmstepd detaches from slurmd, and
        a job's processes can outlive it), found by the SLURM_CONF they inherit, then the daemons."""
        import psutil

        daemons = {p.pid for p in self.procs.values()}
        mine = []
        for proc in psutil.process_iter():
            try:
                if proc.pid not in daemons and proc.pid != os.getpid() and proc.environ().get("SLURM_CONF") == str(self.conf):
                    mine.append(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        for proc in mine:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(mine, timeout=10)
        self._stop_daemons()

    def _stop_daemons(self) -> None:
        for name in [*(f"slurmd-{n}" for n in self.nodes), "slurmctld", "munged"]:
            p = self.procs.get(name)
            if p is None or p.poll() is not None:
                continue
            os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def available() -> bool:
    return missing() is None and shutil.which("sbatch") is not None
