"""The Ray cluster of a sweep: a local one started on 127.0.0.1 (and stopped by process id when a
killed driver left it behind), or an existing cluster joined by address; what it can fit.

Ray 2.60 rewrites 127.0.0.1 to the machine's network address even when told
`_node_ip_address="127.0.0.1"`; with RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 its node-IP lookup returns
loopback, so a local cluster binds and talks on 127.0.0.1 only (it disables nothing else on Linux).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path

from orchestrator.core.errors import UserError
from orchestrator.runtime import netpolicy, ray_cli, signals
from orchestrator.runtime.netpolicy import TELEMETRY_ENV
from orchestrator.storage import s3
from orchestrator.storage.retry import RETRY_ENV

TRACKING_ENV = "GATESWEEP_TRACKING_URI"
"""The tracking URI, unredacted, set in each trial's process from `trial_secrets` (never in a config)."""
SECRET_ENV = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")
"""MLflow's credentials: a trial gets them (and the unredacted tracking URI) through the object
store, as a parameter of its trainable (`trial_secrets`), never through a runtime_env: Ray keeps a
runtime_env in its GCS, shows it in job and actor info and its runtime_env agent writes it to
runtime_env_agent.log in clear."""
PASS_ENV = (
    "GATESWEEP_CACHE",
    "GATESWEEP_ONLINE",
    "HF_HUB_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "HF_HOME",
    "DS_ACCELERATOR",
    "TORCH_EXTENSIONS_DIR",
    *TELEMETRY_ENV,
    *s3.PLAIN_ENV,
    *(s3.CONNECT_TIMEOUT_ENV, s3.REQUEST_TIMEOUT_ENV, RETRY_ENV),
)
"""Driver variables forwarded to every Ray worker (remote clusters do not inherit the driver's).
Where an object store is: its endpoint and region travel; its keys (AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN) do not: a runtime_env is stored in Ray's GCS and shown
in its job and actor info, so each node takes them from its own environment (the `ray start`
environment, a profile, an instance role). GATESWEEP_SCRATCH is each node's own, never forwarded."""


def ray_processes(marker: str, node_id: str | None = None) -> list:
    """Processes of one Ray instance: those whose command line holds `marker` (its session or
    temp folder), those carrying its node id, and all their descendants (Ray's agents rename
    themselves, e.g. `ray::DashboardAgent`, but are children of the raylet)."""
    import psutil

    roots = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if marker in " ".join(proc.info["cmdline"] or []) or (node_id and proc.environ().get("RAY_NODE_ID") == node_id):
                roots.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    found = {p.pid: p for p in roots}
    for proc in roots:
        try:
            for child in proc.children(recursive=True):
                found.setdefault(child.pid, child)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return [p for pid, p in found.items() if pid != os.getpid()]


def kill_processes(procs: list) -> int:
    import psutil

    for proc in procs:
        try:
            proc.kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    psutil.wait_procs(procs, timeout=10)
    return len(procs)


def kill_stale_ray(state: dict, log: Callable[[str], None]) -> None:
    """A driver killed with SIGKILL leaves its local Ray behind; stop it by process id. Called
    with the sweep's lock held, so the driver that started that Ray is known to be gone."""
    pid, session = state.get("driver_pid"), state.get("ray_session_dir")
    if not pid or not session:
        return
    n = kill_processes(session_processes(state))
    if n:
        log(f"stopped {n} Ray processes left by the previous driver (pid {pid})")


def session_processes(local: dict) -> list:
    """Every process of a local Ray (`RayCluster.local`, as saved in state.json): those found by its
    session and node, and those recorded at its start that still run, each once."""
    found = {p.pid: p for p in ray_processes(local["ray_session_dir"], local.get("ray_node_id"))}
    for proc in recorded_processes(local.get("ray_pids", [])):
        found.setdefault(proc.pid, proc)
    return list(found.values())


def recorded_processes(pids: list) -> list:
    """The processes of a recorded [[pid, create_time], ...] list that still run as themselves.
    Ray's agents rename themselves and outlive a raylet killed with its driver (GCS and raylet
    share the driver's fate), orphaned and no longer findable by session or parent, so a local
    Ray's processes are recorded at its start."""
    import psutil

    out = []
    for pid, created in pids:
        try:
            proc = psutil.Process(int(pid))
            if abs(proc.create_time() - float(created)) < 1e-3:
                out.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError, TypeError):
            continue
    return out


def cpus_needed(resources) -> int:
    """The CPUs one trial takes from Ray (a multi-worker trial also needs a sliver for its Tune function)."""
    res = resources
    return math.ceil(res.workers_per_trial * res.cpus_per_worker + (0.01 if res.workers_per_trial > 1 else 0))


def oversubscription(resources, cores: int | None = None) -> str | None:
    """Why a local Ray would be told more CPUs than this machine has (None when it fits): a trial
    of `workers_per_trial` x `cpus_per_worker` larger than the cores runs, but its workers share them."""
    cores = cores or len(os.sched_getaffinity(0))
    need = cpus_needed(resources)
    if need <= cores:
        return None
    res = resources
    return (
        f"resources: a trial takes workers_per_trial {res.workers_per_trial} x cpus_per_worker {res.cpus_per_worker:g} CPUs, "
        f"this machine has {cores}; the local Ray is told {need} CPUs, so the trial's workers share {cores} cores (slower, not refused)"
    )


class RayCluster:
    """`start()` joins `address` or starts a local Ray; `stop()` leaves it as found."""

    def __init__(self, resources, *, address: str | None, tracking_uri: str, max_concurrent: int | None = None):
        self.resources, self.address, self.uri, self.max_concurrent = resources, address, tracking_uri, max_concurrent
        self.local: dict | None = None
        """For a local Ray this driver started: its session folder, node id and the driver's pid."""

    def start(self) -> None:
        import sys

        if "ray" in sys.modules and sys.modules["ray"].is_initialized():  # joined already (to check resources)
            return
        # Ray reads these when it is imported: set them first
        # Tune's own console output (boxes, TensorBoard hints) would drown the progress lines
        os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
        # Ctrl-C reaches the driver as KeyboardInterrupt (Tune's own handler would swallow it and
        # return as if the sweep had ended); the runs are then marked interrupted
        os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
        os.environ.setdefault("RAY_AUTH_MODE", "token")
        # Tune's own per-trial CSV and TensorBoard files: every result is in MLflow, nothing reads
        # them, and their loggers cost a sweep about 2 CPU-s (tensorboardX's import, and torch's
        # through it, and a write per result); the JSON one stays (`ray.tune.build_tuner`).
        # TUNE_DISABLE_AUTO_CALLBACK_LOGGERS=0 brings them back
        os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
        if not self.address or self.address.rsplit(":", 1)[0].strip("[]") in ("localhost", "127.0.0.1", "::1"):
            os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        import ray

        env = {k: os.environ[k] for k in PASS_ENV if k in os.environ}
        # a stopped trial (ASHA) records why and flushes its metrics before its actor is reused
        env.setdefault("TUNE_FUNCTION_THREAD_TIMEOUT_S", "60")
        env.setdefault("HF_HUB_OFFLINE", os.environ.get("HF_HUB_OFFLINE", "1"))
        env.setdefault("HF_DATASETS_OFFLINE", os.environ.get("HF_DATASETS_OFFLINE", "1"))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH")]))
        runtime_env = {"env_vars": env}
        if self.address:
            host = self.address.rsplit(":", 1)[0]
            # on the head machine of a loopback test cluster (127.0.0.x), the driver is that node
            extra = {"_node_ip_address": host} if host.startswith("127.") and host != "127.0.0.1" else {}
            ray.init(address=self.address, runtime_env=runtime_env, log_to_driver=False, logging_level="WARNING", **extra)
        else:
            try:
                netpolicy.require_ray_head_guard()  # a Ray the guard was not written for would probe cloud metadata
            except netpolicy.RayGuardError as err:
                raise UserError(str(err)) from None
            ray_cli.node_defaults()  # no idle workers no trial would use (the local Ray's raylet inherits them)
            with signals.deferred():  # a signal now is acted on once Ray is up and its processes are recorded
                need = cpus_needed(self.resources)  # more than the cores: oversubscription() says so at launch
                ray.init(
                    num_cpus=max(len(os.sched_getaffinity(0)), need),
                    include_dashboard=False,
                    _node_ip_address="127.0.0.1",
                    runtime_env=runtime_env,
                    log_to_driver=False,
                    logging_level="WARNING",
                )
                from ray._private import worker as ray_worker

                session, node = ray_worker._global_node.get_session_dir_path(), ray.get_runtime_context().get_node_id()
                self.local = {
                    "ray_session_dir": session,
                    "ray_node_id": node,
                    "ray_pids": [[p.pid, p.create_time()] for p in ray_processes(session, node)],
                    "driver_pid": os.getpid(),
                }
        signals.install_interrupt()  # ray.init installed its own SIGTERM handler

    def stop(self) -> None:
        """Shut Ray down; for a local Ray this driver started, also wait for its processes to exit
        and stop any left (ray.shutdown does not wait for its workers, which on a busy machine
        linger for many seconds) by pid."""
        import ray

        with signals.ignored():  # a second signal must not leave Ray half stopped
            # found before the shutdown: once the raylet is gone its workers are orphans, no longer its descendants
            before = session_processes(self.local) if self.local else []
            if ray.is_initialized():
                ray.shutdown()
            if self.local:
                import psutil

                procs = {p.pid: p for p in [*before, *session_processes(self.local)]}
                _, alive = psutil.wait_procs(list(procs.values()), timeout=10)
                kill_processes(alive)

    def trial_secrets(self) -> dict[str, str]:
        """What each trial's process sets in its environment before it talks to MLflow: the
        unredacted tracking URI and MLflow's credentials (SECRET_ENV) as the driver has them."""
        return {TRACKING_ENV: self.uri, **{k: os.environ[k] for k in SECRET_ENV if k in os.environ}}

    def check_resources(self) -> None:
        """UserError when no node of the cluster can hold one worker of a trial, or the whole
        cluster cannot hold one trial (Tune would wait for them forever)."""
        import ray

        res = self.resources
        need = {"CPU": res.cpus_per_worker, "GPU": res.gpus_per_worker}
        nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
        total = {k: sum(n.get(k, 0.0) for n in nodes) for k in need}
        fits_one_worker = any(all(n.get(k, 0.0) >= v for k, v in need.items() if v) for n in nodes)
        fits_trial = all(total[k] >= v * res.workers_per_trial for k, v in need.items() if v)
        if not (fits_one_worker and fits_trial):
            have = f"{len(nodes)} node(s): " + "; ".join(
                f"node {i}: {n.get('CPU', 0):g} CPU, {n.get('GPU', 0):g} GPU" for i, n in enumerate(nodes[:8])
            )
            raise UserError(
                f"resources: a trial needs {res.workers_per_trial} worker(s) of {res.cpus_per_worker:g} CPU and "
                f"{res.gpus_per_worker:g} GPU each; the cluster at {self.address} has {have}"
            )

    def concurrency(self) -> int:
        """Trials at once: --max-concurrent, else resources.max_concurrent (0 in either: what the cluster fits)."""
        import ray

        return trials_at_once(self.max_concurrent, self.resources, ray.cluster_resources())


def trials_at_once(requested: int | None, res, total: dict) -> int:
    """Trials at once: `requested` (--max-concurrent) when given, else `res.max_concurrent`; 0
    means the same on the command line as in the sweep file: as many as the cluster's CPUs (and
    GPUs, `total`: Ray's cluster resources) fit, at least one."""
    n = res.max_concurrent if requested is None else requested
    if n:
        return n
    fit = int(total.get("CPU", 1) // (res.cpus_per_worker * res.workers_per_trial))
    if res.gpus_per_worker:
        fit = min(fit, int(total.get("GPU", 0) // (res.gpus_per_worker * res.workers_per_trial)))
    return max(1, fit)
