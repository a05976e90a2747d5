"""The MLflow side of a sweep: the parent run, one child run per trial created before launch (for
grid sweeps), the payload each trial receives, and, at the end, every trial's outcome read back
from the store (the source of truth) with the runs settled that no trial code could settle."""

from __future__ import annotations

import json
import os
import shutil
import socket
from dataclasses import dataclass, field
from pathlib import Path

from dashboards.summary import summary_markdown
from orchestrator.launch.state import save_state
from orchestrator.ray.payload import TrialPayload
from orchestrator.spec.expand import ExpandedTrial, Expansion
from orchestrator.spec.files import UserError
from orchestrator.spec.sweep import SweepSpec
from orchestrator.tracking import RunLogger, client, get_or_create_experiment, names, redact_uri, run_outcome, run_state, search_all
from orchestrator.tracking.outcomes import OUTCOME_TAG, REASON_TAG, STOPPED_TAG


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


def finished_runs(uri: str, experiment: str) -> dict[str, object]:
    """config hash -> a FINISHED run of it in the experiment (any sweep or `gatesweep train`)."""
    cl = client(uri)
    exp = cl.get_experiment_by_name(experiment)
    if exp is None:
        return {}
    out: dict[str, object] = {}
    for run in search_all(cl, [exp.experiment_id], "attributes.status = 'FINISHED'"):
        h = run.data.tags.get(names.CONFIG_HASH_TAG)
        if h and h not in out:
            out[h] = run
    return out


def refuse_live_driver(cl, exp_id: str, name: str) -> None:
    """A sweep of this name still RUNNING in the store under a live driver on this machine (one
    launched with another --runs-dir, whose lock this driver cannot see) is refused too."""
    import psutil

    running = cl.search_runs(
        [exp_id],
        filter_string=f"tags.`gatesweep.sweep` = '{name}' and tags.`gatesweep.kind` = 'sweep' and attributes.status = 'RUNNING'",
        max_results=100,
    )
    for run in running:
        host, _, pid = run.data.tags.get(names.DRIVER_TAG, "").rpartition(":")
        if host == socket.gethostname() and pid.isdigit() and int(pid) != os.getpid() and psutil.pid_exists(int(pid)):
            try:
                cmd = " ".join(psutil.Process(int(pid)).cmdline())
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            if "gatesweep" in cmd or "orchestrator" in cmd:
                raise UserError(
                    f"sweep {name!r} is already running in this store (driver pid {pid} on host {host}, "
                    f"parent run {run.info.run_id}); wait for it, or stop it and `gatesweep resume` it"
                )


class SweepRuns:
    """Parent and child runs of one launch of a sweep, and its state.json."""

    def __init__(
        self, spec: SweepSpec, expansion: Expansion, *, folder: Path, source: Path, uri: str, state: dict, resume: bool, rerun: bool
    ):
        self.spec, self.expansion, self.dir, self.source, self.uri = spec, expansion, folder, source, uri
        self.state, self.resume, self.rerun = state, resume, rerun
        self.experiment = spec.tracking.experiment
        self.rows: dict[str, TrialRow] = {}

    def open_parent(self) -> str:
        cl = client(self.uri)
        exp_id = get_or_create_experiment(cl, self.experiment, self.uri)
        parent = self.state.get("parent_run_id") if self.resume else None
        driver = f"{socket.gethostname()}:{os.getpid()}"
        if parent:
            cl.update_run(parent, status="RUNNING")
            cl.set_tag(parent, names.DRIVER_TAG, driver)
        else:
            refuse_live_driver(cl, exp_id, self.spec.name)
            self.state["source"] = str(self.source)
            tags = {
                names.SWEEP_TAG: self.spec.name,
                names.KIND_TAG: "sweep",
                names.NOTE_TAG: self.spec.description,
                names.TRACKING_URI_TAG: redact_uri(self.uri),
                names.DRIVER_TAG: driver,
            }
            parent = cl.create_run(exp_id, run_name=self.spec.name, tags=tags).info.run_id
            logger = RunLogger(self.uri, parent)
            e = self.expansion
            logger.log_params(
                {
                    "sweep.cells": e.cells,
                    "sweep.trials": len(e.trials),
                    "sweep.excluded": e.excluded,
                    "sweep.duplicates": e.duplicates,
                    "sweep.search": self.spec.search.type,
                    "sweep.axes": ",".join(e.varying) or "-",
                    names.SWEEP_SPACE_PARAM: ",".join(self.spec.search.space) or "-",
                }
            )
            logger.log_artifact(self.source)
        self.state.update(
            {
                "name": self.spec.name,
                "parent_run_id": parent,
                "experiment": self.experiment,
                "sweep_file": str(self.dir / "sweep.yaml"),
                "trials": self.state.get("trials", {}),
            }
        )
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.source != (self.dir / "sweep.yaml").resolve():
            shutil.copyfile(self.source, self.dir / "sweep.yaml")
        return parent

    def prepare_trials(self, parent: str) -> list[TrialPayload]:
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
                if run.data.tags.get(names.PARENT_TAG) != parent:
                    cl.set_tag(run.info.run_id, names.also_in_tag(self.spec.name), parent)
                continue
            payloads.append(self._payload(t, parent, cl, exp_id, row))
        save_state(self.dir, self.state)
        return payloads

    def _payload(self, t: ExpandedTrial, parent: str, cl, exp_id: str, row: TrialRow) -> TrialPayload:
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
            tags = {
                names.SWEEP_TAG: self.spec.name,
                names.CONFIG_HASH_TAG: t.config_hash,
                names.TRIAL_NAME_TAG: t.name,
                names.PARENT_TAG: parent,
                **{names.axis_tag(k): str(v) for k, v in t.axes.items()},
            }
            run_id = cl.create_run(exp_id, run_name=t.name, tags=tags).info.run_id
            cl.update_run(run_id, status="SCHEDULED")
        row.run_id = run_id
        self.state["trials"][t.config_hash] = {"run_id": run_id, "name": t.name, "run_dir": str(run_dir)}
        res = self.spec.resources
        return TrialPayload(
            config=t.config.to_dict(),
            config_hash=t.config_hash,
            name=t.name,
            run_id=run_id,
            run_dir=str(run_dir),
            tracking_uri=redact_uri(self.uri),
            experiment=self.experiment,
            parent_run_id=parent,
            sweep=self.spec.name,
            workers=res.workers_per_trial,
            cpus=res.cpus_per_worker,
            gpus=res.gpus_per_worker,
            tags={names.axis_tag(k): str(v) for k, v in t.axes.items()},
            judged_by=self.judged_by(),
        )

    def judged_by(self) -> list[str]:
        """The metrics the scheduler and searcher read from every result."""
        out = []
        if self.spec.scheduler is not None and self.spec.scheduler.type == "asha":
            out.append(self.spec.scheduler.metric)
        if self.spec.search.type == "optuna":
            out.append(self.spec.search.metric)
        return sorted(set(out))

    def collect(
        self, parent: str, wall: float, interrupted: bool, stopped: dict[str, int], errors: dict[str, str], error: str = ""
    ) -> SweepOutcome:
        """Read every trial's final state from MLflow (the source of truth) and settle the runs
        whose own code could not record their end: trials the scheduler stopped (decided here,
        by ASHA's own decisions, not by the timing of the trial's last write), trials interrupted
        with the driver, and trials whose worker died until retries ran out."""
        cl = client(self.uri)
        exp_id = cl.get_experiment_by_name(self.experiment).experiment_id
        children = search_all(cl, [exp_id], f"tags.`mlflow.parentRunId` = '{parent}'")
        by_id = {r.info.run_id: r for r in children}
        rows = list(self.rows.values())
        if self.spec.search.type == "optuna":
            rows = [
                TrialRow(
                    run.data.tags.get(names.TRIAL_NAME_TAG, run.info.run_name),
                    run.data.tags.get(names.CONFIG_HASH_TAG, ""),
                    run.info.run_id,
                    axes={},
                )
                for run in children
            ]
        for row in rows:
            run = by_id.get(row.run_id) if row.run_id else None
            if run is None:
                continue
            tags = run.data.tags
            key = tags.get(names.TUNE_TRIAL_ID_TAG) or row.config_hash
            row.metrics = dict(run.data.metrics)
            status = run.info.status
            if status == "FINISHED":
                row.status = "finished"
            elif key in stopped:
                row.status, row.outcome = "stopped", "stopped"
                row.reason = tags.get(STOPPED_TAG) or f"stopped by the scheduler (ASHA) at step {stopped[key]}"
                if status != "KILLED" or STOPPED_TAG not in tags:
                    cl.set_tag(row.run_id, STOPPED_TAG, row.reason)
                    cl.set_tag(row.run_id, OUTCOME_TAG, "stopped")
                    cl.set_terminated(row.run_id, status="KILLED")
            elif (state := run_state(status, tags)).state in ("failed", "stopped"):
                row.status, row.reason, row.outcome = state.state, state.reason, run_outcome(status, tags)
            elif interrupted or error or state.state == "interrupted":
                row.status, row.outcome = "interrupted", "interrupted"
                why = "interrupted" if interrupted or not error else f"not run to the end: the sweep stopped ({error[:200]})"
                row.reason = f"{why}; `gatesweep resume {self.spec.name}` continues it"
                if status != "KILLED":
                    cl.set_tag(row.run_id, OUTCOME_TAG, "interrupted")
                    cl.set_tag(row.run_id, REASON_TAG, row.reason)
                    cl.set_terminated(row.run_id, status="KILLED")
            else:  # RUNNING / SCHEDULED with nobody left to finish it: the worker died, retries ran out
                last = errors.get(key, "")
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
        cl.set_tag(outcome.parent_run_id, names.COUNTS_TAG, json.dumps(counts))
        if outcome.error:
            cl.set_tag(outcome.parent_run_id, REASON_TAG, outcome.error[:4000])
        cl.log_text(outcome.parent_run_id, summary_markdown(outcome.name, [vars(r) for r in outcome.rows]), names.SUMMARY_ARTIFACT)
        if outcome.interrupted:
            cl.set_terminated(outcome.parent_run_id, status="KILLED")
        else:
            every_failed = outcome.rows and all(r.status == "failed" for r in outcome.rows)
            cl.set_terminated(outcome.parent_run_id, status="FAILED" if outcome.error or every_failed else "FINISHED")
        save_state(self.dir, self.state)
