"""Launch a sweep on Ray Tune, with an MLflow parent run and one child run per trial.

One mechanism serves re-runs, resumes and retries: every trial has a fixed checkpoint folder
(RUNS/sweeps/NAME/trials/HASH) and, for grid sweeps, an MLflow child run created before launch.
- a retry (Tune's FailureConfig) calls the trainable again: same run, newest checkpoint;
- `gatesweep resume NAME` re-launches with the same parent run and the unfinished child runs;
  finished ones are not rerun, interrupted ones continue from their checkpoints;
- `gatesweep run` again (or another sweep sharing trials) skips every config hash that already
  finished in the experiment (`--rerun` forces them).
State lives in RUNS/sweeps/NAME/state.json. On a multi-node cluster, RUNS must be on a file
system every node mounts (checkpoints are local files).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from orchestrator.spec.files import UserError
from orchestrator.netpolicy import TELEMETRY_ENV
from orchestrator.tracking.outcomes import OUTCOME_TAG, REASON_TAG, STOPPED_TAG
from orchestrator.spec.sweep import Expansion, ExpandedTrial, SweepSpec
from orchestrator.launch.lock import SweepLock
from orchestrator.tracking import RunLogger, client, get_or_create_experiment, redact_uri
from orchestrator.ray.trainable import TRACKING_ENV

SUMMARY = ("val_loss", "val_ppl", "first_token_attn", "sink_ratio", "gate_score_mean", "max_activation", "loss_spikes", "tokens_per_s")
PASS_ENV = ("GATESWEEP_CACHE", "GATESWEEP_ONLINE", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HOME", "DS_ACCELERATOR",
            "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN", "TORCH_EXTENSIONS_DIR",
            *TELEMETRY_ENV)


@dataclass
class TrialRow:
    name: str
    config_hash: str
    run_id: str | None
    status: str = "pending"
    """pending, running, finished, failed, stopped (ASHA), skipped (finished before), interrupted."""
    metrics: dict = field(default_factory=dict)
    axes: dict = field(default_factory=dict)
    reason: str = ""
    outcome: str = ""
    """outcomes.py's kind (diverged, bad_data, crashed, ...), when the trial did not finish."""


@dataclass
class SweepOutcome:
    name: str
    parent_run_id: str
    rows: list[TrialRow]
    wall_s: float
    interrupted: bool = False
    error: str = ""
    """Why the sweep itself could not go on (Ray or Tune refused), if it could not."""

    @property
    def failed(self) -> int:
        return sum(r.status == "failed" for r in self.rows) + bool(self.error)


def sweep_dir(runs_root: Path, name: str) -> Path:
    return Path(runs_root).resolve() / "sweeps" / name


def load_state(path: Path) -> dict:
    """The sweep's state.json ({} when there is none); UserError in one line when it is damaged."""
    f = path / "state.json"
    if not f.exists():
        return {}
    try:
        state = json.loads(f.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise UserError(f"{f}: damaged sweep state ({type(err).__name__}: {str(err)[:120]}); "
                        "restore it from a backup or launch the sweep again with `gatesweep run`") from None
    problem = _state_problem(state)
    if problem:
        raise UserError(f"{f}: damaged sweep state ({problem}); restore it or launch the sweep again with `gatesweep run`")
    return state


def _state_problem(state) -> str:
    if not isinstance(state, dict):
        return f"expected a JSON object, got {type(state).__name__}"
    for key in ("name", "parent_run_id", "sweep_file"):
        if key in state and not isinstance(state[key], str):
            return f"{key!r} is {type(state[key]).__name__}, expected a string"
    for key in ("name", "parent_run_id"):
        if key not in state:
            return f"{key!r} is missing"
    trials = state.get("trials", {})
    if not isinstance(trials, dict):
        return f"'trials' is {type(trials).__name__}, expected an object"
    for h, t in trials.items():
        if not isinstance(t, dict) or not all(isinstance(t.get(k), (str, type(None))) for k in ("run_id", "name", "run_dir")):
            return f"trial {str(h)[:16]!r} is malformed"
    for key in ("driver_pid",):
        if key in state and not isinstance(state[key], int):
            return f"{key!r} is {type(state[key]).__name__}, expected an integer"
    return ""


def save_state(path: Path, state: dict) -> None:
    path.mkdir(parents=True, exist_ok=True)
    tmp = path / f"state.json.tmp{os.getpid()}"
    tmp.write_text(json.dumps(state, indent=2))
    os.replace(tmp, path / "state.json")


def finished_runs(uri: str, experiment: str) -> dict[str, object]:
    """config hash -> a FINISHED run of it in the experiment (any sweep or `gatesweep train`)."""
    cl = client(uri)
    exp = cl.get_experiment_by_name(experiment)
    if exp is None:
        return {}
    out = {}
    token = None
    while True:
        page = cl.search_runs([exp.experiment_id], filter_string="attributes.status = 'FINISHED'", max_results=5000, page_token=token)
        for run in page:
            h = run.data.tags.get("gatesweep.config_hash")
            if h and h not in out:
                out[h] = run
        token = page.token
        if not token:
            return out


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
    pid, session, node = state.get("driver_pid"), state.get("ray_session_dir"), state.get("ray_node_id")
    if not pid or not session:
        return
    n = kill_processes(ray_processes(session, node))
    if n:
        log(f"stopped {n} Ray processes left by the previous driver (pid {pid})")


def _refuse_live_driver(cl, exp_id: str, name: str) -> None:
    """A sweep of this name still RUNNING in the store under a live driver on this machine (one
    launched with another --runs-dir, whose lock this driver cannot see) is refused too."""
    import psutil

    running = cl.search_runs([exp_id], filter_string=f"tags.`gatesweep.sweep` = '{name}' and tags.`gatesweep.kind` = 'sweep' "
                             "and attributes.status = 'RUNNING'", max_results=100)
    for run in running:
        host, _, pid = run.data.tags.get("gatesweep.driver", "").rpartition(":")
        if host == socket.gethostname() and pid.isdigit() and int(pid) != os.getpid() and psutil.pid_exists(int(pid)):
            try:
                cmd = " ".join(psutil.Process(int(pid)).cmdline())
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            if "gatesweep" in cmd or "orchestrator" in cmd:
                raise UserError(f"sweep {name!r} is already running in this store (driver pid {pid} on host {host}, "
                                f"parent run {run.info.run_id}); wait for it, or stop it and `gatesweep resume` it")


class Launcher:
    def __init__(self, spec: SweepSpec, expansion: Expansion, *, source: Path, runs_root: Path, tracking_uri: str,
                 address: str | None = None, max_concurrent: int | None = None, rerun: bool = False,
                 resume: bool = False, log: Callable[[str], None] = print):
        self.spec, self.expansion, self.source = spec, expansion, Path(source).resolve()
        self.dir = sweep_dir(runs_root, spec.name)
        self.uri, self.address = tracking_uri, address
        self.max_concurrent, self.rerun, self.resume, self.log = max_concurrent, rerun, resume, log
        self.experiment = spec.tracking.experiment
        self.state: dict = load_state(self.dir) if resume else {}
        self.rows: dict[str, TrialRow] = {}
        self.started_ray = False
        self.stopped: dict[str, int] = {}
        """Trials the scheduler stopped (Tune trial id or config hash -> step), as ASHA decided."""
        self.errors: dict[str, str] = {}
        """Tune's last error line per trial (config hash or Tune trial id) for crashed trials."""

    # ---- MLflow side -----------------------------------------------------------------
    def open_parent(self) -> str:
        cl = client(self.uri)
        exp_id = get_or_create_experiment(cl, self.experiment, self.uri)
        parent = self.state.get("parent_run_id") if self.resume else None
        driver = f"{socket.gethostname()}:{os.getpid()}"
        if parent:
            cl.update_run(parent, status="RUNNING")
            cl.set_tag(parent, "gatesweep.driver", driver)
        else:
            _refuse_live_driver(cl, exp_id, self.spec.name)
            self.state["source"] = str(self.source)
            tags = {"gatesweep.sweep": self.spec.name, "gatesweep.kind": "sweep", "mlflow.note.content": self.spec.description,
                    "gatesweep.tracking_uri": redact_uri(self.uri), "gatesweep.driver": driver}
            parent = cl.create_run(exp_id, run_name=self.spec.name, tags=tags).info.run_id
            logger = RunLogger(self.uri, parent)
            e = self.expansion
            logger.log_params({"sweep.cells": e.cells, "sweep.trials": len(e.trials), "sweep.excluded": e.excluded,
                               "sweep.duplicates": e.duplicates, "sweep.search": self.spec.search.type,
                               "sweep.axes": ",".join(e.varying) or "-"})
            logger.log_artifact(self.source)
        self.state.update({"name": self.spec.name, "parent_run_id": parent, "experiment": self.experiment,
                           "sweep_file": str(self.dir / "sweep.yaml"), "trials": self.state.get("trials", {})})
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.source != (self.dir / "sweep.yaml").resolve():
            shutil.copyfile(self.source, self.dir / "sweep.yaml")
        return parent

    def prepare_trials(self, parent: str) -> list[dict]:
        """Skip finished hashes, (re)use or create child runs; return the payloads to launch."""
        done = {} if self.rerun else finished_runs(self.uri, self.experiment)
        cl = client(self.uri)
        exp_id = cl.get_experiment_by_name(self.experiment).experiment_id
        payloads = []
        for t in self.expansion.trials:
            row = TrialRow(t.name, t.config_hash, None, axes=t.axes)
            self.rows[t.config_hash] = row
            if self.spec.search.type == "grid" and t.config_hash in done:
                run = done[t.config_hash]
                row.run_id, row.status, row.metrics = run.info.run_id, "skipped", dict(run.data.metrics)
                if run.data.tags.get("mlflow.parentRunId") != parent:
                    cl.set_tag(run.info.run_id, f"gatesweep.also_in.{self.spec.name}", parent)
                continue
            payloads.append(self._payload(t, parent, cl, exp_id, row))
        save_state(self.dir, self.state)
        return payloads

    def _payload(self, t: ExpandedTrial, parent: str, cl, exp_id: str, row: TrialRow) -> dict:
        run_dir = self.dir / "trials" / t.config_hash
        known = self.state["trials"].get(t.config_hash, {})
        run_id = known.get("run_id")
        if self.spec.search.type == "optuna":
            run_id = None  # created per Tune trial, inside the trainable
        elif run_id and self.resume:
            try:
                status = cl.get_run(run_id).info.status
            except Exception:
                run_id = None
            else:
                if status == "FINISHED" and not self.rerun:
                    row.status = "skipped"
        else:
            run_id = None
        if run_id is None and self.spec.search.type == "grid":
            if run_dir.exists():  # a previous launch's checkpoints belong to another run
                shutil.rmtree(run_dir, ignore_errors=True)
            tags = {"gatesweep.sweep": self.spec.name, "gatesweep.config_hash": t.config_hash,
                    "gatesweep.trial_name": t.name, "mlflow.parentRunId": parent,
                    **{f"gatesweep.axis.{k}": str(v) for k, v in t.axes.items()}}
            run_id = cl.create_run(exp_id, run_name=t.name, tags=tags).info.run_id
            cl.update_run(run_id, status="SCHEDULED")
        row.run_id = run_id
        self.state["trials"][t.config_hash] = {"run_id": run_id, "name": t.name, "run_dir": str(run_dir)}
        res = self.spec.resources
        return {
            "config": t.config.to_dict(), "config_hash": t.config_hash, "name": t.name, "run_id": run_id,
            "run_dir": str(run_dir), "tracking_uri": redact_uri(self.uri), "experiment": self.experiment,
            "parent_run_id": parent, "sweep": self.spec.name, "workers": res.workers_per_trial,
            "cpus": res.cpus_per_worker, "gpus": res.gpus_per_worker,
            "tags": {f"gatesweep.axis.{k}": str(v) for k, v in t.axes.items()},
            "judged_by": self.judged_by(),
        }

    def judged_by(self) -> list[str]:
        """The metrics the scheduler and searcher read from every result."""
        out = []
        if self.spec.scheduler is not None and self.spec.scheduler.type == "asha":
            out.append(self.spec.scheduler.metric)
        if self.spec.search.type == "optuna":
            out.append(self.spec.search.metric)
        return sorted(set(out))

    # ---- Ray side --------------------------------------------------------------------
    def check_cluster_resources(self) -> None:
        """UserError when no node of the cluster can hold one worker of a trial, or the whole
        cluster cannot hold one trial (Tune would wait for them forever)."""
        import ray

        res = self.spec.resources
        need = {"CPU": res.cpus_per_worker, "GPU": res.gpus_per_worker}
        nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
        total = {k: sum(n.get(k, 0.0) for n in nodes) for k in need}
        fits_one_worker = any(all(n.get(k, 0.0) >= v for k, v in need.items() if v) for n in nodes)
        fits_trial = all(total[k] >= v * res.workers_per_trial for k, v in need.items() if v)
        if not (fits_one_worker and fits_trial):
            have = f"{len(nodes)} node(s): " + "; ".join(
                f"node {i}: {n.get('CPU', 0):g} CPU, {n.get('GPU', 0):g} GPU" for i, n in enumerate(nodes[:8]))
            raise UserError(f"resources: a trial needs {res.workers_per_trial} worker(s) of {res.cpus_per_worker:g} CPU and "
                            f"{res.gpus_per_worker:g} GPU each; the cluster at {self.address} has {have}")

    def start_ray(self) -> None:
        # Tune's own console output (boxes, TensorBoard hints) would drown the progress lines
        os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
        # Ctrl-C reaches us as KeyboardInterrupt (Tune's own handler would swallow it and return as
        # if the sweep had ended); the runs are then marked interrupted and `resume` continues them
        os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
        os.environ.setdefault("RAY_AUTH_MODE", "token")
        if not self.address or _loopback(self.address):
            # Ray 2.60 rewrites 127.0.0.1 / localhost to the machine's network address (even with
            # _node_ip_address); with this switch its node-IP lookup returns loopback, so a local
            # cluster binds and talks on 127.0.0.1 only. It disables nothing else on Linux.
            os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        import ray

        if ray.is_initialized():  # connected already (to check a cluster's resources)
            return
        env = {k: os.environ[k] for k in PASS_ENV if k in os.environ}
        env[TRACKING_ENV] = self.uri
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
            _install_interrupt()
        else:
            res = self.spec.resources
            # a multi-worker trial also needs a sliver of CPU for its Tune function: make room
            need = math.ceil(res.workers_per_trial * res.cpus_per_worker + (0.01 if res.workers_per_trial > 1 else 0))
            ray.init(num_cpus=max(len(os.sched_getaffinity(0)), need), include_dashboard=False, _node_ip_address="127.0.0.1",
                     runtime_env=runtime_env, log_to_driver=False, logging_level="WARNING")
            self.started_ray = True
            _install_interrupt()
            from ray._private import worker as ray_worker

            self.state["ray_session_dir"] = ray_worker._global_node.get_session_dir_path()
            self.state["ray_node_id"] = ray.get_runtime_context().get_node_id()
            self.state["driver_pid"] = os.getpid()
            save_state(self.dir, self.state)

    def concurrency(self) -> int:
        import ray

        res = self.spec.resources
        if self.max_concurrent:
            return self.max_concurrent
        if res.max_concurrent:
            return res.max_concurrent
        total = ray.cluster_resources()
        per_trial_cpu = res.cpus_per_worker * res.workers_per_trial
        n = int(total.get("CPU", 1) // per_trial_cpu)
        if res.gpus_per_worker:
            n = min(n, int(total.get("GPU", 0) // (res.gpus_per_worker * res.workers_per_trial)))
        return max(1, n)

    def tuner(self, payloads: list[dict], arm: dict | None = None):
        from ray import tune

        from orchestrator.ray import trainable as tune_trial

        spec, res = self.spec, self.spec.resources
        if res.workers_per_trial > 1:
            resources = {"cpu": 0.01}  # the TorchTrainer's workers reserve the real resources
        else:
            resources = {"cpu": res.cpus_per_worker, "gpu": res.gpus_per_worker}
        trainable = tune.with_resources(tune_trial.trainable, resources)
        scheduler = None
        if spec.scheduler is not None and spec.scheduler.type == "asha":
            max_t = spec.scheduler.max_t or max(t.config.train.steps for t in self.expansion.trials)
            scheduler = _recording_asha(self.stopped)(time_attr="step", metric=spec.scheduler.metric, mode=spec.scheduler.mode,
                                                      grace_period=spec.scheduler.grace_period, max_t=max_t,
                                                      reduction_factor=spec.scheduler.reduction_factor)
        names = {p["config_hash"]: p["name"] for p in payloads}
        if arm is None:
            param_space = {"trial": tune.grid_search(payloads)}
            tune_cfg = tune.TuneConfig(max_concurrent_trials=self.concurrency(), scheduler=scheduler, reuse_actors=True,
                                       trial_name_creator=lambda tr: names.get(tr.config["trial"]["config_hash"], tr.trial_id),
                                       trial_dirname_creator=lambda tr: tr.trial_id)
        else:
            from ray.tune.search.optuna import OptunaSearch
            import optuna

            sampler = optuna.samplers.TPESampler(seed=spec.search.seed) if spec.search.sampler == "tpe" else optuna.samplers.RandomSampler(seed=spec.search.seed)
            space = {path: _tune_distribution(dist) for path, dist in spec.search.space.items()}
            param_space = {"trial": arm, "space": space}
            search = _failure_aware(OptunaSearch)(metric=spec.search.metric, mode=spec.search.mode, sampler=sampler)
            tune_cfg = tune.TuneConfig(search_alg=search, num_samples=spec.search.num_samples, scheduler=scheduler, reuse_actors=True,
                                       max_concurrent_trials=self.concurrency(), trial_dirname_creator=lambda tr: tr.trial_id,
                                       trial_name_creator=lambda tr: f"{arm['name']}-{tr.trial_id[-5:]}")
        run_cfg = tune.RunConfig(
            name=f"{spec.name}-{arm['name'] if arm else 'grid'}-{int(time.time())}",
            storage_path=str(self.dir / "tune"),
            failure_config=tune.FailureConfig(max_failures=spec.retries),
            verbose=0,
            callbacks=[_Progress(self.log, self.errors)],
        )
        return tune.Tuner(trainable, param_space=param_space, tune_config=tune_cfg, run_config=run_cfg)

    # ---- the whole thing -------------------------------------------------------------
    def run(self) -> SweepOutcome:
        """Lock the sweep, write its runs, run it on Ray, read back every outcome, close the parent.
        SIGTERM and SIGHUP stop it the way Ctrl-C does (runs marked interrupted, Ray stopped)."""
        t0 = time.time()
        with SweepLock(self.dir, self.spec.name), _signals_as_interrupt():
            interrupted, error = False, ""
            try:
                if self.resume:
                    kill_stale_ray(self.state, self.log)
                if self.address:  # a cluster that cannot fit one trial is refused before any run is written
                    try:
                        self.start_ray()
                        self.check_cluster_resources()
                    except BaseException:
                        self.stop_ray()
                        raise
                parent = self.open_parent()
                payloads = self.prepare_trials(parent)
            except KeyboardInterrupt:
                parent = self.state.get("parent_run_id")
                if not parent:
                    raise
                payloads, interrupted = [], True
            payloads = [p for p in payloads if self.rows[p["config_hash"]].status != "skipped"]
            skipped = sum(r.status == "skipped" for r in self.rows.values())
            if not interrupted:
                self.log(f"sweep {self.spec.name}: {len(self.expansion.trials)} trials, {skipped} already finished, {len(payloads)} to run"
                         f" (MLflow experiment {self.experiment!r}, parent run {parent})")
            if payloads:
                try:
                    self.start_ray()
                    self.log(f"Ray: {'cluster ' + self.address if self.address else 'local, 127.0.0.1'}; "
                             f"up to {self.concurrency()} trials at once")
                    if self.spec.search.type == "grid":
                        self.tuner(payloads).fit()
                    else:
                        for arm in payloads:
                            self.log(f"optuna arm {arm['name']}: {self.spec.search.num_samples} samples")
                            self.tuner([arm], arm=arm).fit()
                except KeyboardInterrupt:
                    interrupted = True
                except Exception as err:  # Ray or Tune gave up: say why, settle every run, close the parent
                    error = f"{type(err).__name__}: {str(err).strip().splitlines()[0][:300] if str(err).strip() else ''}"
                    self.log(f"sweep error: {error}")
                finally:
                    self.stop_ray()
            outcome = self.collect(parent, time.time() - t0, interrupted)
            outcome.error = error
            self.close_parent(outcome)
            return outcome

    def stop_ray(self) -> None:
        import ray

        with _signals_ignored():  # a second signal must not leave Ray half stopped
            if ray.is_initialized():
                ray.shutdown()
        if self.started_ray:
            for key in ("ray_session_dir", "ray_node_id", "driver_pid"):
                self.state.pop(key, None)
            save_state(self.dir, self.state)

    def collect(self, parent: str, wall: float, interrupted: bool) -> SweepOutcome:
        """Read every trial's final state from MLflow (the source of truth) and settle the runs
        whose own code could not record their end: trials the scheduler stopped (decided here,
        by ASHA's own decisions, not by the timing of the trial's last write), trials interrupted
        with the driver, and trials whose worker died until retries ran out."""
        from orchestrator.tracking import search_all

        cl = client(self.uri)
        exp_id = cl.get_experiment_by_name(self.experiment).experiment_id
        children = search_all(cl, [exp_id], f"tags.`mlflow.parentRunId` = '{parent}'")
        by_id = {r.info.run_id: r for r in children}
        rows = list(self.rows.values())
        if self.spec.search.type == "optuna":
            rows = [TrialRow(run.data.tags.get("gatesweep.trial_name", run.info.run_name), run.data.tags.get("gatesweep.config_hash", ""),
                             run.info.run_id, axes={}) for run in children]
        for row in rows:
            run = by_id.get(row.run_id) if row.run_id else None
            if run is None:
                continue
            tags = run.data.tags
            key = tags.get("gatesweep.tune_trial_id") or row.config_hash
            row.metrics = dict(run.data.metrics)
            status = run.info.status
            if status == "FINISHED":
                row.status = "finished"
            elif key in self.stopped:
                row.status, row.outcome = "stopped", "stopped"
                row.reason = tags.get(STOPPED_TAG) or f"stopped by the scheduler (ASHA) at step {self.stopped[key]}"
                if status != "KILLED" or STOPPED_TAG not in tags:
                    cl.set_tag(row.run_id, STOPPED_TAG, row.reason)
                    cl.set_tag(row.run_id, OUTCOME_TAG, "stopped")
                    cl.set_terminated(row.run_id, status="KILLED")
            elif status == "FAILED":
                row.status, row.outcome = "failed", tags.get(OUTCOME_TAG, "crashed")
                row.reason = tags.get(REASON_TAG, "") or "failed (no reason recorded)"
            elif status == "KILLED" and STOPPED_TAG in tags:
                row.status, row.outcome, row.reason = "stopped", "stopped", tags[STOPPED_TAG]
            elif interrupted or (status == "KILLED" and tags.get(OUTCOME_TAG) == "interrupted"):
                row.status, row.outcome = "interrupted", "interrupted"
                row.reason = f"interrupted; `gatesweep resume {self.spec.name}` continues it"
                if status != "KILLED":
                    cl.set_tag(row.run_id, OUTCOME_TAG, "interrupted")
                    cl.set_tag(row.run_id, REASON_TAG, row.reason)
                    cl.set_terminated(row.run_id, status="KILLED")
            else:  # RUNNING / SCHEDULED with nobody left to finish it: the worker died, retries ran out
                last = self.errors.get(key, "")
                row.status, row.outcome = "failed", "crashed"
                row.reason = "the trial's worker died and retries ran out" + (f" (last error: {last})" if last else "")
                cl.set_tag(row.run_id, OUTCOME_TAG, "crashed")
                cl.set_tag(row.run_id, REASON_TAG, row.reason)
                cl.set_terminated(row.run_id, status="FAILED")
        return SweepOutcome(self.spec.name, parent, rows, wall, interrupted)

    def close_parent(self, outcome: SweepOutcome) -> None:
        cl = client(self.uri)
        counts: dict[str, int] = {}
        for r in outcome.rows:
            counts[r.status] = counts.get(r.status, 0) + 1
        cl.set_tag(outcome.parent_run_id, "gatesweep.counts", json.dumps(counts))
        if outcome.error:
            cl.set_tag(outcome.parent_run_id, REASON_TAG, outcome.error[:4000])
        cl.log_text(outcome.parent_run_id, summary_markdown(outcome), "summary.md")
        if outcome.interrupted:
            cl.set_terminated(outcome.parent_run_id, status="KILLED")
        else:
            every_failed = outcome.rows and all(r.status == "failed" for r in outcome.rows)
            cl.set_terminated(outcome.parent_run_id, status="FAILED" if outcome.error or every_failed else "FINISHED")
        save_state(self.dir, self.state)


def _tune_distribution(dist: dict):
    from ray import tune

    from orchestrator.spec.sweep import numeric_bounds

    kind, args = next(iter(dist.items()))
    if kind == "choice":
        return tune.choice(args)
    lo, hi = numeric_bounds(args)
    if kind == "loguniform":
        return tune.loguniform(lo, hi)
    if kind == "uniform":
        return tune.uniform(lo, hi)
    return tune.randint(int(lo), int(hi) + 1)


INTERRUPTING = (signal.SIGTERM, signal.SIGHUP)


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def _install_interrupt() -> None:
    """(Re)install the handlers; ray.init replaces SIGTERM's with its own sys.exit."""
    if threading.current_thread() is threading.main_thread():
        for sig in INTERRUPTING:
            signal.signal(sig, _interrupt)


@contextlib.contextmanager
def _signals_as_interrupt():
    """SIGTERM (kill, batch schedulers) and SIGHUP (a closed terminal) stop the sweep the way
    Ctrl-C does: as KeyboardInterrupt in the main thread. Handlers are restored afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.getsignal(sig) for sig in INTERRUPTING}
    _install_interrupt()
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def _signals_ignored():
    """While Ray shuts down, further SIGINT/SIGTERM/SIGHUP are noted, not acted on."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    saved = {sig: signal.getsignal(sig) for sig in sigs}
    for sig in sigs:
        signal.signal(sig, lambda signum, frame: print("gatesweep: stopping Ray, please wait", file=sys.stderr, flush=True))
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def _trial_key(trial) -> str:
    """The key a Tune trial is known by on both sides: its config hash (grid) or Tune trial id (Optuna)."""
    cfg = getattr(trial, "config", None) or {}
    if "space" in cfg:  # an Optuna trial: one run per Tune trial, tagged with the Tune trial id
        return trial.trial_id
    return (cfg.get("trial") or {}).get("config_hash") or trial.trial_id


def _recording_asha(stopped: dict):
    """ASHAScheduler that also writes down each early stop it decides (trial key -> step), so the
    driver knows which trials were stopped however their workers' last writes went."""
    from ray.tune.schedulers import ASHAScheduler, TrialScheduler

    class RecordingASHA(ASHAScheduler):
        def on_trial_result(self, tune_controller, trial, result):
            action = super().on_trial_result(tune_controller, trial, result)
            if action == TrialScheduler.STOP and not result.get("failed"):
                stopped[_trial_key(trial)] = int(result.get("step", 0))
            return action

    return RecordingASHA


def _failure_aware(searcher_cls):
    """A searcher that records a permanently failed trial (its result has failed=1) as failed
    (Optuna's FAIL state), not as a value."""

    class FailureAware(searcher_cls):
        def on_trial_complete(self, trial_id, result=None, error=False):
            if result and result.get("failed"):
                return super().on_trial_complete(trial_id, None, error=True)
            return super().on_trial_complete(trial_id, result, error)

    return FailureAware


class _Progress:
    """Tune callback printing one line per event: start, evaluation, completion, error."""

    def __new__(cls, log, errors):
        from ray.tune import Callback

        class Progress(Callback):
            def _name(self, trial):
                return getattr(trial, "custom_trial_name", None) or str(trial)

            def on_trial_start(self, iteration, trials, trial, **info):
                log(f"  start   {self._name(trial)}  ({self._counts(trials)})")

            def on_trial_result(self, iteration, trials, trial, result, **info):
                if result.get("warnings"):
                    log(f"  warning {self._name(trial)}: {result['warnings']}")
                if result.get("failed"):
                    return
                parts = [f"step {int(result.get('step', 0))}"]
                for key in ("val_loss", "first_token_attn", "sink_ratio", "gate_score_mean"):
                    if key in result:
                        parts.append(f"{key} {result[key]:.3f}")
                log(f"  eval    {self._name(trial)}  " + "  ".join(parts))

            def on_trial_complete(self, iteration, trials, trial, **info):
                failed = (trial.last_result or {}).get("failed")
                log(f"  {'failed' if failed else 'done':<7} {self._name(trial)}  ({self._counts(trials)})")

            def on_trial_error(self, iteration, trials, trial, **info):
                errors[_trial_key(trial)] = _first_line(trial)
                log(f"  error   {self._name(trial)}: {_first_line(trial)}  ({self._counts(trials)})")

            def on_trial_recover(self, iteration, trials, trial, **info):
                log(f"  retry   {self._name(trial)}: {_first_line(trial)}")

            def _counts(self, trials):
                states = [t.status for t in trials]
                return (f"running {states.count('RUNNING')}, done {states.count('TERMINATED')}, "
                        f"errored {states.count('ERROR')}, pending {states.count('PENDING')}")

        return Progress()


def _first_line(trial) -> str:
    path = getattr(trial, "error_file", None)
    try:
        text = Path(path).read_text() if path else ""
    except OSError:
        text = ""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:200] if lines else "error"


def summary_rows(outcome: SweepOutcome) -> list[dict]:
    """One row per trial with the headline metrics (the same columns for every row)."""
    extra = {"bbc/copy_acc": "copy_acc"} if any("bbc/copy_acc" in r.metrics for r in outcome.rows) else {}
    rows = []
    for r in outcome.rows:
        row = {"trial": r.name, "status": r.status}
        for key in SUMMARY:
            row[key] = r.metrics.get(key)
        for key, col in extra.items():
            row[col] = r.metrics.get(key)
        rows.append(row)
    return rows


def summary_markdown(outcome: SweepOutcome) -> str:
    rows = summary_rows(outcome)
    if not rows:
        return f"# {outcome.name}\n\nno trials\n"
    cols = list(rows[0])
    lines = [f"# sweep {outcome.name}", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in rows:
        lines.append("| " + " | ".join("-" if row[c] is None else (f"{row[c]:.4g}" if isinstance(row[c], float) else str(row[c])) for c in cols) + " |")
    reasons = [f"- {r.name}: {r.reason}" for r in outcome.rows if r.reason]
    if reasons:
        lines += ["", "## notes", *reasons]
    return "\n".join(lines) + "\n"


def _loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]")
    return host in ("localhost", "127.0.0.1", "::1")
