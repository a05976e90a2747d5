"""Launch a sweep on Ray Tune, with an MLflow parent run and one child run per trial.

One mechanism serves re-runs, resumes and retries: every trial has a fixed checkpoint folder
(RUNS/sweeps/NAME/trials/HASH) and, for grid sweeps, an MLflow child run created before launch.
- a retry (Tune's FailureConfig) calls the trainable again: same run, newest checkpoint;
- `gatesweep resume NAME` re-launches with the same parent run and the unfinished child runs;
  finished ones are not rerun, interrupted ones continue from their checkpoints;
- `gatesweep run` again (or another sweep sharing trials) skips every config hash that already
  finished in the experiment (`--rerun` forces them).
On a multi-node cluster, RUNS is a file system every node mounts or an object-store URI
(`--runs-dir s3://bucket/prefix`): then the store is the truth and every process works in a local
scratch folder (`orchestrator.storage.scratch.scratch_root`): this driver keeps Tune's own folder,
sweep.log and the report there (sweep.log and the report are uploaded at the end).

A launch's phases, each in its own module: what earlier launches left (`launch.history`: a
sweep whose latest launch finished every trial is shown again, nothing run), the runs written
(`launch.runs`: parent, child runs, payloads, state.json), the trials on Ray Tune
(`launch.dispatch`, over `ray.cluster`, `ray.tune` and `ray.progress`; a promoting ladder's stages
in `launch.promotion`), every outcome read back and the parent closed (`launch.outcome`); the
report is published by the CLI after (`dashboards.publish`), then `Launcher.upload` copies it to a
remote state folder. Around them: `launch.lock` and `launch.state` (the driver's own state),
`launch.logfile` (Ray's and MLflow's own log lines to RUNS/sweeps/NAME/sweep.log),
`orchestrator.runtime.signals` (SIGTERM and SIGHUP as Ctrl-C).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.core.errors import UserError
from orchestrator.launch import logfile
from orchestrator.launch.dispatch import Dispatch
from orchestrator.launch.lock import SweepLock
from orchestrator.launch.outcome import SweepOutcome, close_parent, collect, sweep_error
from orchestrator.launch.runs import SweepRuns
from orchestrator.launch.state import load_state, sweep_dir
from orchestrator.ray.cluster import RayCluster, kill_stale_ray
from orchestrator.ray.payload import TrialPayload
from orchestrator.runtime import signals
from orchestrator.spec.expand import Expansion
from orchestrator.spec.sweep import SweepSpec
from orchestrator.storage import Location
from orchestrator.storage.retry import retried
from orchestrator.storage.scratch import scratch_root


@dataclass
class Opened:
    """What the first phase of a launch left: its parent run, the trials to run, and whether a
    signal or an error stopped it (then nothing runs; the runs written are settled)."""

    parent: str
    payloads: list[TrialPayload]
    interrupted: bool = False
    error: str = ""


class Launcher:
    """One launch (or resume) of a sweep: lock, runs, cluster, Tune, outcome."""

    def __init__(
        self,
        spec: SweepSpec,
        expansion: Expansion,
        *,
        source: Path,
        runs_root: Location,
        tracking_uri: str,
        address: str | None = None,
        max_concurrent: int | None = None,
        rerun: bool = False,
        resume: bool = False,
        log: Callable[[str], None] = print,
        bar: bool = False,
    ):
        self.spec, self.expansion, self.log, self.resume = spec, expansion, log, resume
        self.bar = bar
        """Progress as a bar (a terminal) instead of plain lines (`orchestrator.ray.progress`)."""
        self.dir = sweep_dir(runs_root, spec.name)
        """The sweep's state folder (a Location: local, or on an object store)."""
        self.work = self.dir.local if self.dir.local is not None else _driver_scratch(spec.name)
        """This driver's local folder: the state folder itself, or its scratch folder for a remote one."""
        self.state: dict = load_state(self.dir) if resume else {}
        self.runs = SweepRuns(
            spec, expansion, folder=self.dir, source=Path(source).resolve(), uri=tracking_uri, state=self.state, resume=resume, rerun=rerun
        )
        self.cluster = RayCluster(spec.resources, address=address, tracking_uri=tracking_uri, max_concurrent=max_concurrent)
        self.dispatch = Dispatch(self.runs, self.cluster, tune_dir=self.work / "tune", log=log, bar=bar)
        self.stopped = self.dispatch.stopped
        """Trials the scheduler stopped (Tune trial id or config hash -> step), as ASHA decided."""
        self.errors = self.dispatch.errors
        """Tune's last error line per trial (config hash or Tune trial id) for crashed trials."""

    def run(self) -> SweepOutcome:
        """Lock the sweep, write its runs, run it on Ray, read back every outcome, close the parent.
        SIGTERM and SIGHUP stop it the way Ctrl-C does (runs marked interrupted, Ray stopped)."""
        t0 = time.time()
        lock = SweepLock(self.dir, self.spec.name, say=self.log)
        with lock, signals.as_interrupt():
            logfile.attach(self.work)  # Ray's and MLflow's own lines, from here on in the sweep's folder
            latest = self.runs.finished_launch()
            if latest is not None:  # a re-run of a finished sweep: its latest launch has every trial
                return self._reused(latest, t0)
            opened = self._open()
            payloads = [p for p in opened.payloads if self.runs.rows[p.config_hash].status != "skipped"]
            if not opened.interrupted:
                skipped = sum(r.status == "skipped" for r in self.runs.rows.values())
                self.log(
                    f"sweep {self.spec.name}: {len(self.expansion.trials)} trials, {skipped} already finished, "
                    f"{len(payloads)} to run (MLflow experiment {self.runs.experiment!r}, parent run {opened.parent})"
                )
            interrupted, error = self.dispatch.run(payloads) if payloads else (opened.interrupted, opened.error)
            outcome = self._close(opened.parent, time.time() - t0, interrupted, error)
            if lock.lost:  # an object-store lock whose heartbeats did not reach the store for too long
                self.log(
                    f"warning: another driver took over the lock {lock.path} during this launch; check the sweep's state before resuming"
                )
            return outcome

    def _reused(self, latest, t0: float) -> SweepOutcome:
        """The outcome of a re-run of a finished sweep: its latest launch, nothing run."""
        info = latest.info
        self.log(
            f"sweep {self.spec.name}: all {len(self.expansion.trials)} trials finished in its latest launch (parent run {info.run_id}); "
            "nothing to run, no new parent run (`--rerun` runs them again)"
        )
        rows = list(self.runs.rows.values())
        return SweepOutcome(
            self.spec.name, info.run_id, rows, time.time() - t0, experiment_id=info.experiment_id, parent_status=info.status, reused=True
        )

    def _open(self) -> Opened:
        """The first phase: stop a killed driver's Ray (a resume), check an `--address` cluster,
        open the parent run and write the trials' runs. A signal or an error after the parent
        exists is an `Opened` with nothing to run (the outcome settles what was written); before
        that it is raised (an OSError as a UserError naming the state folder)."""
        try:
            if self.resume:
                kill_stale_ray(self.state, self.log)
            if self.cluster.address:  # a cluster that cannot fit one trial is refused before any run is written
                self.dispatch.join()
            parent = self.runs.open_parent()
            return Opened(parent, self.runs.prepare_trials(parent))
        except KeyboardInterrupt:
            if not self.state.get("parent_run_id"):
                raise
            return Opened(self.state["parent_run_id"], [], interrupted=True)
        except UserError:
            raise
        except Exception as err:  # e.g. a full disk under state.json or sweep.yaml: settle what was started
            parent = self.state.get("parent_run_id")
            if isinstance(err, OSError):
                if not parent:
                    raise UserError(f"{self.dir}: the sweep's state cannot be written ({err.strerror or err})") from None
                error = f"the sweep's state could not be written to {self.dir} ({err.strerror or err})"
            else:
                if not parent:
                    raise
                error = sweep_error(err)
            self.log(f"sweep error: {error}")
            return Opened(parent, [], error=error)

    def _close(self, parent: str, wall: float, interrupted: bool, error: str) -> SweepOutcome:
        """The last phase: every trial's outcome read back and settled, the parent closed (on every
        way out, signals ignored meanwhile)."""
        with signals.ignored():
            outcome = collect(self.runs, parent, wall, interrupted, self.stopped, self.errors, error)
            outcome.error = error
            try:
                close_parent(self.runs, outcome)
            except OSError as err:  # the parent is closed (its status is set first); only state.json is not
                self.log(f"warning: {self.dir / 'state.json'} could not be written ({err.strerror or err})")
        return outcome

    def upload(self, name: str) -> None:
        """Copy the file or folder `name` of this driver's scratch folder to the remote state folder
        (nothing for a local one); a failure is a warning (the runs are in MLflow)."""
        if self.dir.local is not None or not (self.work / name).exists():
            return
        try:
            retried(lambda: self.dir.child(name).upload(self.work / name), f"uploading {name}", budget_s=60)
        except OSError as err:
            self.log(f"warning: {self.dir / name} could not be uploaded ({str(err).strip()[:200]})")


def _driver_scratch(name: str) -> Path:
    folder = scratch_root() / "sweeps" / name / "driver"
    folder.mkdir(parents=True, exist_ok=True)
    return folder
