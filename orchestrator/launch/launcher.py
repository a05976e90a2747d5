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
sweep.log and the report there (sweep.log and the report are uploaded at the end). The rooms: `launch.runs` (MLflow side), `ray.cluster` (the cluster), `ray.tune` (Tune,
ASHA, Optuna, the progress callback), `ray.progress` (the console's progress and ETA), `launch.logfile`
(Ray's and MLflow's own log lines to RUNS/sweeps/NAME/sweep.log), `launch.state` / `launch.lock` (the driver's own state), `orchestrator.runtime.signals` (SIGTERM and SIGHUP as Ctrl-C).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from orchestrator.core.errors import UserError
from orchestrator.launch import logfile
from orchestrator.launch.lock import SweepLock
from orchestrator.launch.outcome import SweepOutcome, close_parent, collect
from orchestrator.launch.runs import SweepRuns
from orchestrator.launch.state import load_state, save_state, sweep_dir
from orchestrator.ray.cluster import RayCluster, kill_stale_ray, oversubscription
from orchestrator.ray.payload import TrialPayload
from orchestrator.runtime import signals
from orchestrator.spec.expand import Expansion
from orchestrator.spec.sweep import SweepSpec
from orchestrator.storage import Location
from orchestrator.storage.retry import retried
from orchestrator.storage.s3 import credentials_withheld
from orchestrator.storage.scratch import scratch_root


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
        self.stopped: dict[str, int] = {}
        """Trials the scheduler stopped (Tune trial id or config hash -> step), as ASHA decided."""
        self.errors: dict[str, str] = {}
        """Tune's last error line per trial (config hash or Tune trial id) for crashed trials."""

    def run(self) -> SweepOutcome:
        """Lock the sweep, write its runs, run it on Ray, read back every outcome, close the parent.
        SIGTERM and SIGHUP stop it the way Ctrl-C does (runs marked interrupted, Ray stopped)."""
        t0 = time.time()
        lock = SweepLock(self.dir, self.spec.name, say=self.log)
        with lock, signals.as_interrupt():
            logfile.attach(self.work)  # Ray's and MLflow's own lines, from here on in the sweep's folder
            interrupted, error = False, ""
            latest = self.runs.finished_launch()
            if latest is not None:  # a re-run of a finished sweep: its latest launch has every trial
                n = len(self.expansion.trials)
                info = latest.info
                self.log(
                    f"sweep {self.spec.name}: all {n} trials finished in its latest launch (parent run {info.run_id}); "
                    "nothing to run, no new parent run (`--rerun` runs them again)"
                )
                rows = list(self.runs.rows.values())
                return SweepOutcome(
                    self.spec.name,
                    info.run_id,
                    rows,
                    time.time() - t0,
                    experiment_id=info.experiment_id,
                    parent_status=info.status,
                    reused=True,
                )
            try:
                if self.resume:
                    kill_stale_ray(self.state, self.log)
                if self.cluster.address:  # a cluster that cannot fit one trial is refused before any run is written
                    self._join_cluster()
                parent = self.runs.open_parent()
                payloads = self.runs.prepare_trials(parent)
            except KeyboardInterrupt:
                parent = self.state.get("parent_run_id")
                if not parent:
                    raise
                payloads, interrupted = [], True
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
                    lines = str(err).strip().splitlines()
                    error = f"{type(err).__name__}: {lines[0][:300] if lines else ''}"
                payloads = []
                self.log(f"sweep error: {error}")
            payloads = [p for p in payloads if self.runs.rows[p.config_hash].status != "skipped"]
            if not interrupted:
                skipped = sum(r.status == "skipped" for r in self.runs.rows.values())
                self.log(
                    f"sweep {self.spec.name}: {len(self.expansion.trials)} trials, {skipped} already finished, "
                    f"{len(payloads)} to run (MLflow experiment {self.runs.experiment!r}, parent run {parent})"
                )
            if payloads:
                try:
                    self._start_cluster()
                    with credentials_withheld():  # Ray Tune would copy the AWS keys into every trial's runtime_env
                        self._fit(payloads)
                except KeyboardInterrupt:
                    interrupted = True
                except Exception as err:  # Ray or Tune gave up: say why, settle every run, close the parent
                    lines = str(err).strip().splitlines()
                    error = f"{type(err).__name__}: {lines[0][:300] if lines else ''}"
                    self.log(f"sweep error: {error}")
                finally:
                    with signals.ignored():  # after the first signal the teardown runs to its end
                        self._stop_cluster()
            with signals.ignored():  # every way out closes the parent run
                outcome = collect(self.runs, parent, time.time() - t0, interrupted, self.stopped, self.errors, error)
                outcome.error = error
                try:
                    close_parent(self.runs, outcome)
                except OSError as err:  # the parent is closed (its status is set first); only state.json is not
                    self.log(f"warning: {self.dir / 'state.json'} could not be written ({err.strerror or err})")
            if lock.lost:  # an object-store lock whose heartbeats did not reach the store for too long
                self.log(
                    f"warning: another driver took over the lock {lock.path} during this launch; check the sweep's state before resuming"
                )
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

    def _join_cluster(self) -> None:
        try:
            self.cluster.start()
            logfile.recapture()
            self.cluster.check_resources()
        except BaseException:
            self.cluster.stop()
            raise

    def _start_cluster(self) -> None:
        if not self.cluster.address:
            warning = oversubscription(self.spec.resources)
            if warning:
                self.log(f"warning: {warning}")
        self.cluster.start()
        logfile.recapture()  # Ray configured its logger when it was imported
        if self.cluster.local:  # a killed driver's successor finds this Ray and stops it by pid
            self.state.update(self.cluster.local)
            save_state(self.dir, self.state)
        where = f"cluster {self.cluster.address}" if self.cluster.address else "local, 127.0.0.1"
        self.log(f"Ray: {where}; up to {self.cluster.concurrency()} trials at once")

    def _stop_cluster(self) -> None:
        self.cluster.stop()
        if self.cluster.local:
            for key in self.cluster.local:
                self.state.pop(key, None)
            try:
                save_state(self.dir, self.state)
            except OSError as err:  # Ray is stopped; a resume finds only processes that are gone (recorded by pid and start time)
                self.log(f"warning: {self.dir / 'state.json'} could not be written ({err.strerror or err})")

    def _fit_promoted(self, payloads: list[TrialPayload], common: dict) -> None:
        """A promoting ladder, stage by stage (`launch.promotion`): each stage's trials of the arms
        still in, then the decision of which arms train the next rung."""
        from orchestrator.launch.promotion import Promotion, settle_not_promoted, stages
        from orchestrator.ray.tune import build_tuner
        from orchestrator.tracking import names

        assert self.spec.ladder is not None and self.spec.ladder.promote is not None
        promo = Promotion(self.spec.ladder.promote, self.expansion)
        member = (names.member_tag(self.spec.name), self.runs.state["parent_run_id"])
        board, done = common["board"], []
        plan = stages(self.expansion, promo.cfg)
        for i, rungs in enumerate(plan):
            batch = [p for p in payloads if promo.rung[p.config_hash] in rungs and promo.active(p.config_hash)]
            left = {p.run_id: promo.stopped[promo.arm[p.config_hash]] for p in payloads
                    if promo.rung[p.config_hash] in rungs and not promo.active(p.config_hash) and p.run_id}  # fmt: skip
            settle_not_promoted(self.runs.uri, left, board.say)
            board.skip({p.config_hash for p in payloads if p.run_id in left})  # they will not run: out of the ETA
            if batch:
                board.say(f"ladder stage {i + 1}/{len(plan)}: rung(s) {', '.join(rungs)}, {len(batch)} trials")
                build_tuner(self.spec, batch, **common).fit()
            done += rungs
            if i + 1 < len(plan):
                d = promo.decide(self.runs.uri, self.runs.experiment, member, done, plan[i + 1][0])
                for arm, why in d.stopped.items():
                    board.say(f"  promotion: {arm} stops: {why}")
                for note in d.notes:
                    board.say(f"  promotion: {note}")
                board.say(f"  promotion after {d.after_rung}: {', '.join(d.kept)} go on to {plan[i + 1][0]}")
                self.state["promotion"] = json.loads(promo.to_json())
                save_state(self.dir, self.state)
        from orchestrator.tracking import client

        client(self.runs.uri).log_text(member[1], promo.to_json(), "promotion.json")

    def _fit(self, payloads: list[TrialPayload]) -> None:
        from orchestrator.ray.tune import build_tuner

        spec = self.spec
        board = self._board(payloads)
        common = dict(
            max_t=(spec.scheduler.max_t if spec.scheduler else 0) or max(t.config.train.steps for t in self.expansion.trials),
            storage=self.work / "tune",
            concurrency=self.cluster.concurrency(),
            retries=spec.retries,
            board=board,
            stopped=self.stopped,
            errors=self.errors,
            secrets=self.cluster.trial_secrets(),
        )
        try:
            if spec.search.type == "grid" and spec.ladder is not None and spec.ladder.promote is not None:
                self._fit_promoted(payloads, common)
                return
            if spec.search.type == "grid":
                build_tuner(spec, payloads, **common).fit()
                return
            for arm in payloads:
                board.say(f"optuna arm {arm.name}: {spec.search.num_samples} samples")
                build_tuner(spec, [arm], arm=arm, **common).fit()
        finally:
            board.close()

    def _board(self, payloads: list[TrialPayload]):
        """The progress board over the trials this launch runs (each Optuna arm's samples too)."""
        from orchestrator.ray.progress import BarDisplay, PlainDisplay, SweepProgress, work_of

        if self.spec.search.type == "grid":
            plan = [work_of(p, key=p.config_hash) for p in payloads]
        else:
            plan = [work_of(p) for p in payloads for _ in range(self.spec.search.num_samples)]
        display = BarDisplay() if self.bar else PlainDisplay(self.log)
        return SweepProgress(plan, concurrency=min(self.cluster.concurrency(), max(1, len(plan))), display=display)


def _driver_scratch(name: str) -> Path:
    folder = scratch_root() / "sweeps" / name / "driver"
    folder.mkdir(parents=True, exist_ok=True)
    return folder
