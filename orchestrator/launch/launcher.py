"""Launch a sweep on Ray Tune, with an MLflow parent run and one child run per trial.

One mechanism serves re-runs, resumes and retries: every trial has a fixed checkpoint folder
(RUNS/sweeps/NAME/trials/HASH) and, for grid sweeps, an MLflow child run created before launch.
- a retry (Tune's FailureConfig) calls the trainable again: same run, newest checkpoint;
- `gatesweep resume NAME` re-launches with the same parent run and the unfinished child runs;
  finished ones are not rerun, interrupted ones continue from their checkpoints;
- `gatesweep run` again (or another sweep sharing trials) skips every config hash that already
  finished in the experiment (`--rerun` forces them).
On a multi-node cluster, RUNS must be on a file system every node mounts (checkpoints are local
files). The rooms: `launch.runs` (MLflow side), `ray.cluster` (the cluster), `ray.tune` (Tune,
ASHA, Optuna, progress), `launch.state` / `launch.lock` (the driver's own state), `orchestrator.signals` (SIGTERM and SIGHUP as Ctrl-C).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from orchestrator import signals
from orchestrator.launch.lock import SweepLock
from orchestrator.launch.outcome import SweepOutcome, close_parent, collect
from orchestrator.launch.runs import SweepRuns
from orchestrator.launch.state import load_state, save_state, sweep_dir
from orchestrator.ray.cluster import RayCluster, kill_stale_ray
from orchestrator.spec.expand import Expansion
from orchestrator.spec.sweep import SweepSpec


class Launcher:
    """One launch (or resume) of a sweep: lock, runs, cluster, Tune, outcome."""

    def __init__(
        self,
        spec: SweepSpec,
        expansion: Expansion,
        *,
        source: Path,
        runs_root: Path,
        tracking_uri: str,
        address: str | None = None,
        max_concurrent: int | None = None,
        rerun: bool = False,
        resume: bool = False,
        log: Callable[[str], None] = print,
    ):
        self.spec, self.expansion, self.log, self.resume = spec, expansion, log, resume
        self.dir = sweep_dir(runs_root, spec.name)
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
        with SweepLock(self.dir, self.spec.name), signals.as_interrupt():
            interrupted, error = False, ""
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
                    self._fit([p.to_dict() for p in payloads])
                except KeyboardInterrupt:
                    interrupted = True
                except Exception as err:  # Ray or Tune gave up: say why, settle every run, close the parent
                    lines = str(err).strip().splitlines()
                    error = f"{type(err).__name__}: {lines[0][:300] if lines else ''}"
                    self.log(f"sweep error: {error}")
                finally:
                    self._stop_cluster()
            outcome = collect(self.runs, parent, time.time() - t0, interrupted, self.stopped, self.errors, error)
            outcome.error = error
            close_parent(self.runs, outcome)
            return outcome

    def _join_cluster(self) -> None:
        try:
            self.cluster.start()
            self.cluster.check_resources()
        except BaseException:
            self.cluster.stop()
            raise

    def _start_cluster(self) -> None:
        self.cluster.start()
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
            save_state(self.dir, self.state)

    def _fit_promoted(self, payloads: list[dict], common: dict) -> None:
        """A promoting ladder, stage by stage (`launch.promotion`): each stage's trials of the arms
        still in, then the decision of which arms train the next rung."""
        from orchestrator.launch.promotion import Promotion, settle_not_promoted, stages
        from orchestrator.ray.tune import build_tuner
        from orchestrator.tracking import names

        assert self.spec.ladder is not None and self.spec.ladder.promote is not None
        promo = Promotion(self.spec.ladder.promote, self.expansion)
        member = (names.member_tag(self.spec.name), self.runs.state["parent_run_id"])
        done: list[str] = []
        plan = stages(self.expansion, promo.cfg)
        for i, rungs in enumerate(plan):
            batch = [p for p in payloads if promo.rung[p["config_hash"]] in rungs and promo.active(p["config_hash"])]
            left = {p["run_id"]: promo.stopped[promo.arm[p["config_hash"]]] for p in payloads
                    if promo.rung[p["config_hash"]] in rungs and not promo.active(p["config_hash"]) and p["run_id"]}  # fmt: skip
            settle_not_promoted(self.runs.uri, left, self.log)
            if batch:
                self.log(f"ladder stage {i + 1}/{len(plan)}: rung(s) {', '.join(rungs)}, {len(batch)} trials")
                build_tuner(self.spec, batch, **common).fit()
            done += rungs
            if i + 1 < len(plan):
                d = promo.decide(self.runs.uri, self.runs.experiment, member, done)
                for arm, why in d.stopped.items():
                    self.log(f"  promotion: {arm} stops: {why}")
                for note in d.notes:
                    self.log(f"  promotion: {note}")
                self.log(f"  promotion after {d.after_rung}: {', '.join(d.kept)} go on to {plan[i + 1][0]}")
                self.state["promotion"] = json.loads(promo.to_json())
                save_state(self.dir, self.state)
        from orchestrator.tracking import client

        client(self.runs.uri).log_text(member[1], promo.to_json(), "promotion.json")

    def _fit(self, payloads: list[dict]) -> None:
        from orchestrator.ray.tune import build_tuner

        spec = self.spec
        common = dict(
            max_t=(spec.scheduler.max_t if spec.scheduler else 0) or max(t.config.train.steps for t in self.expansion.trials),
            storage=self.dir / "tune",
            concurrency=self.cluster.concurrency(),
            retries=spec.retries,
            log=self.log,
            stopped=self.stopped,
            errors=self.errors,
        )
        if spec.search.type == "grid" and spec.ladder is not None and spec.ladder.promote is not None:
            self._fit_promoted(payloads, common)
            return
        if spec.search.type == "grid":
            build_tuner(spec, payloads, **common).fit()
            return
        for arm in payloads:
            self.log(f"optuna arm {arm['name']}: {spec.search.num_samples} samples")
            build_tuner(spec, [arm], arm=arm, **common).fit()
