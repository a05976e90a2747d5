"""The trials of a launch on Ray Tune: the cluster up (a local Ray's processes recorded in
state.json, so that a killed driver's successor stops them), the console's progress board over
the trials to run, a grid's one Tuner (a promoting ladder's one per stage, `launch.promotion`;
an Optuna sweep's one per arm), and the cluster down, whatever stopped the trials.

`Dispatch.join` checks an `--address` cluster before any run is written (a cluster that cannot
fit one trial is refused); `Dispatch.run` is the launch's second phase, after `launch.runs`
wrote the runs and before `launch.outcome` reads them back. What Tune decided on the way (the
trials ASHA stopped, the last error line of each crashed trial) is kept for the outcome."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from orchestrator.launch import logfile
from orchestrator.launch.outcome import sweep_error
from orchestrator.launch.promotion import run_stages
from orchestrator.launch.runs import SweepRuns
from orchestrator.launch.state import save_state
from orchestrator.ray.cluster import RayCluster, oversubscription
from orchestrator.ray.payload import TrialPayload
from orchestrator.ray.progress import BarDisplay, PlainDisplay, SweepProgress, work_of
from orchestrator.runtime import signals
from orchestrator.storage.s3 import credentials_withheld


class Dispatch:
    """Runs one launch's trials on its Ray cluster (`runs`: the launch's runs and state)."""

    def __init__(self, runs: SweepRuns, cluster: RayCluster, *, tune_dir: Path, log: Callable[[str], None], bar: bool = False):
        self.runs, self.cluster, self.tune_dir, self.log, self.bar = runs, cluster, tune_dir, log, bar
        self.spec, self.expansion = runs.spec, runs.expansion
        self.stopped: dict[str, int] = {}
        """Trials the scheduler stopped (Tune trial id or config hash -> step), as ASHA decided."""
        self.errors: dict[str, str] = {}
        """Tune's last error line per trial (config hash or Tune trial id) for crashed trials."""

    def join(self) -> None:
        """Connect to the `--address` cluster and check that it fits one trial (stopped if not)."""
        try:
            self.cluster.start()
            logfile.recapture()
            self.cluster.check_resources()
        except BaseException:
            self.cluster.stop()
            raise

    def run(self, payloads: list[TrialPayload]) -> tuple[bool, str]:
        """Run `payloads` on Tune; (interrupted, error): Ctrl-C (or SIGTERM), or why Ray or Tune
        gave up. The cluster is stopped on every way out, to its end even after a signal."""
        interrupted, error = False, ""
        try:
            self._start()
            with credentials_withheld():  # Ray Tune would copy the AWS keys into every trial's runtime_env
                self._fit(payloads)
        except KeyboardInterrupt:
            interrupted = True
        except Exception as err:  # Ray or Tune gave up: say why; the caller settles every run and closes the parent
            error = sweep_error(err)
            self.log(f"sweep error: {error}")
        finally:
            with signals.ignored():  # after the first signal the teardown runs to its end
                self._stop()
        return interrupted, error

    def _start(self) -> None:
        if not self.cluster.address:
            warning = oversubscription(self.spec.resources)
            if warning:
                self.log(f"warning: {warning}")
        self.cluster.start()
        logfile.recapture()  # Ray configured its logger when it was imported
        if self.cluster.local:  # a killed driver's successor finds this Ray and stops it by pid
            self.runs.state.update(self.cluster.local)
            save_state(self.runs.dir, self.runs.state)
        where = f"cluster {self.cluster.address}" if self.cluster.address else "local, 127.0.0.1"
        self.log(f"Ray: {where}; up to {self.cluster.concurrency()} trials at once")

    def _stop(self) -> None:
        self.cluster.stop()
        if self.cluster.local:
            for key in self.cluster.local:
                self.runs.state.pop(key, None)
            try:
                save_state(self.runs.dir, self.runs.state)
            except OSError as err:  # Ray is stopped; a resume finds only processes that are gone (recorded by pid and start time)
                self.log(f"warning: {self.runs.dir / 'state.json'} could not be written ({err.strerror or err})")

    def _fit(self, payloads: list[TrialPayload]) -> None:
        from orchestrator.ray.tune import build_tuner  # lazy: imports ray (a launch that runs nothing never loads it)

        spec = self.spec
        board = self._board(payloads)
        common = dict(
            max_t=(spec.scheduler.max_t if spec.scheduler else 0) or max(t.config.train.steps for t in self.expansion.trials),
            storage=self.tune_dir,
            concurrency=self.cluster.concurrency(),
            retries=spec.retries,
            board=board,
            stopped=self.stopped,
            errors=self.errors,
            secrets=self.cluster.trial_secrets(),
        )
        try:
            if spec.search.type == "grid" and spec.ladder is not None and spec.ladder.promote is not None:
                run_stages(self.runs, payloads, board, lambda batch: build_tuner(spec, batch, **common).fit())
            elif spec.search.type == "grid":
                build_tuner(spec, payloads, **common).fit()
            else:
                for arm in payloads:
                    board.say(f"optuna arm {arm.name}: {spec.search.num_samples} samples")
                    build_tuner(spec, [arm], arm=arm, **common).fit()
        finally:
            board.close()

    def _board(self, payloads: list[TrialPayload]) -> SweepProgress:
        """The progress board over the trials this launch runs (each Optuna arm's samples too)."""
        if self.spec.search.type == "grid":
            plan = [work_of(p, key=p.config_hash) for p in payloads]
        else:
            plan = [work_of(p) for p in payloads for _ in range(self.spec.search.num_samples)]
        display = BarDisplay() if self.bar else PlainDisplay(self.log)
        return SweepProgress(plan, concurrency=min(self.cluster.concurrency(), max(1, len(plan))), display=display)
