"""The MLflow side of a launch, written before any trial starts: the parent run, one child run per
trial (for grid sweeps; a trial whose config hash finished before is reused, not run again), the
payload each trial receives, and state.json with the sweep file beside it. What earlier launches
left is read by `launch.history`; every trial's outcome is read back at the end by `launch.outcome`.

What the MLflow UI shows is set up here too: the parent's description links the comparison
report and the runs table, and the sweep's saved view lists this launch's trials (every one
carries `names.member_tag(sweep) = <parent id>`, the ones it reused included) with its axes and
headline metrics as columns (`orchestrator.tracking.views`)."""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

from orchestrator.core import metrics as registry
from orchestrator.launch.history import complete_launch, finished_runs, refuse_live_driver, resumed_run
from orchestrator.launch.rows import TrialRow
from orchestrator.launch.state import save_state, store_sweep_file
from orchestrator.ray.payload import TrialPayload
from orchestrator.spec.expand import ExpandedTrial, Expansion
from orchestrator.spec.sweep import SweepSpec
from orchestrator.storage import Location
from orchestrator.tracking import RunLogger, client, get_or_create_experiment, names, redact_uri, views


def create_parent(cl, exp_id: str, spec: SweepSpec, expansion: Expansion, *, uri: str, source: Path, driver: str) -> str:
    """A new parent run for a launch of `spec`: its tags (`driver` is host:pid), the expansion's
    shape as params, and the sweep file `source` as an artifact; returns its run id."""
    tags = {
        names.SWEEP_TAG: spec.name,
        names.KIND_TAG: names.SWEEP_KIND,
        names.NOTE_TAG: spec.description,
        names.TRACKING_URI_TAG: redact_uri(uri),
        names.DRIVER_TAG: driver,
    }
    parent = cl.create_run(exp_id, run_name=spec.name, tags=tags).info.run_id
    cl.set_tag(parent, names.NOTE_TAG, views.parent_note(spec.description, exp_id, parent, spec.name))
    logger = RunLogger(uri, parent)
    e = expansion
    logger.log_params(
        {
            "sweep.cells": e.cells,
            "sweep.trials": len(e.trials),
            "sweep.excluded": e.excluded,
            "sweep.duplicates": e.duplicates,
            "sweep.search": spec.search.type,
            "sweep.axes": ",".join(e.varying) or "-",
            names.SWEEP_SPACE_PARAM: ",".join(spec.search.space) or "-",
        }
    )
    logger.log_artifact(source)
    return parent


def group_tags(key: str, label: str) -> dict[str, str]:
    """A trial's group in the sweep's saved view and its colour there (`views.group_key`)."""
    return {key: label, names.RUN_COLOR_TAG: views.group_colour(key, label)}


def create_child(cl, exp_id: str, sweep: str, t: ExpandedTrial, parent: str, group: dict[str, str]) -> str:
    """A grid trial's run, SCHEDULED until its trainable starts, tagged with its sweep, hash, name,
    parent, membership, axes and `group` (`group_tags`)."""
    tags = {
        names.KIND_TAG: names.TRIAL_KIND,
        names.SWEEP_TAG: sweep,
        names.CONFIG_HASH_TAG: t.config_hash,
        names.TRIAL_NAME_TAG: t.name,
        names.PARENT_TAG: parent,
        names.member_tag(sweep): parent,
        **{names.axis_tag(k): str(v) for k, v in t.axes.items()},
        **group,
    }
    run_id = cl.create_run(exp_id, run_name=t.name, tags=tags).info.run_id
    cl.update_run(run_id, status="SCHEDULED")
    return run_id


def make_payload(
    spec: SweepSpec,
    t: ExpandedTrial,
    *,
    run_id: str | None,
    run_dir: Location,
    parent: str,
    uri: str,
    judged_by: list[str],
    group: dict[str, str] | None = None,
) -> TrialPayload:
    """What crosses into the trainable for one trial (`group`: its `group_tags`)."""
    res = spec.resources
    return TrialPayload(
        config=t.config.to_dict(),
        config_hash=t.config_hash,
        name=t.name,
        run_id=run_id,
        run_dir=run_dir,
        tracking_uri=redact_uri(uri),
        experiment=spec.tracking.experiment,
        parent_run_id=parent,
        sweep=spec.name,
        workers=res.workers_per_trial,
        cpus=res.cpus_per_worker,
        gpus=res.gpus_per_worker,
        tags={names.member_tag(spec.name): parent, **{names.axis_tag(k): str(v) for k, v in t.axes.items()}, **(group or {})},
        judged_by=judged_by,
    )


class SweepRuns:
    """Parent and child runs of one launch of a sweep, and its state.json."""

    def __init__(
        self,
        spec: SweepSpec,
        expansion: Expansion,
        *,
        folder: Location,
        source: Path,
        uri: str,
        state: dict,
        resume: bool,
        rerun: bool,
    ):
        self.spec, self.expansion, self.source, self.uri = spec, expansion, source, uri
        self.dir = folder
        """The sweep's state folder: a local folder or an object-store prefix."""
        self.state, self.resume, self.rerun = state, resume, rerun
        self.experiment = spec.tracking.experiment
        self.rows: dict[str, TrialRow] = {}
        self.labels = {t.config_hash: views.group_label(t.axes) for t in expansion.trials}
        """Each trial's group (config hash -> label): its values on the varied axes but the seeds."""
        self.group = views.group_key(spec.name, self.labels.values())
        """The group tag's name, chosen so that every group gets its own colour in the UI."""

    def group_of(self, config_hash: str) -> dict[str, str]:
        return group_tags(self.group, self.labels.get(config_hash, "all runs"))

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
            parent = create_parent(cl, exp_id, self.spec, self.expansion, uri=self.uri, source=self.source, driver=driver)
        self.state.update(
            {
                "name": self.spec.name,
                "parent_run_id": parent,
                "experiment": self.experiment,
                "sweep_file": str(self.dir / "sweep.yaml"),
                "trials": self.state.get("trials", {}),
            }
        )
        store_sweep_file(self.dir, self.source)
        views.write_sweep_view(
            cl,
            exp_id,
            self.spec.name,
            search_filter=views.member_filter(self.spec.name, parent),
            axes=self.view_axes(),
            runs=self.view_runs(),
            group=self.group,
        )
        return parent

    def finished_launch(self):
        """The sweep's latest parent run (an MLflow Run) when it has exactly the finished runs of every trial of
        this expansion as its members (a re-run of a finished sweep; `history.complete_launch`): the
        launch to show again instead of a new, empty one, its rows filled. None otherwise (something
        to run, `--rerun`, a resume, an Optuna sweep, a changed sweep file, or a launch of another
        sweep holding the runs)."""
        if self.resume or self.rerun or self.spec.search.type != "grid":
            return None
        found = complete_launch(self.uri, self.experiment, self.spec.name, self.expansion)
        if found is None:
            return None
        latest, done = found
        for t in self.expansion.trials:
            run = done[t.config_hash]
            row = TrialRow(t.name, t.config_hash, run.info.run_id, status="skipped", axes=t.axes, member=True)
            row.metrics = dict(run.data.metrics)
            self.rows[t.config_hash] = row
        return latest

    def view_axes(self) -> list[str]:
        """The axes the runs table shows: the varying grid axes, then Optuna's sampled ones."""
        return [*self.expansion.varying, *(p for p in self.spec.search.space if p not in self.expansion.varying)]

    def view_parallel(self, logged: set[str]) -> tuple[list[str], list[str]] | None:
        """A search sweep's parallel-coordinates chart: its sampled parameters and the varied
        grid axes that are params (the seeds and the gate's label left out), against the
        headline metrics the trials logged and the searched metric."""
        if self.spec.search.type != "optuna":
            return None
        params = [p for p in self.view_axes() if p != views.GATE_AXIS and not names.is_seed_axis(p)]
        metrics = [m for m in views.table_metrics(logged) if m in registry.names("headline")]
        if self.spec.search.metric in logged and self.spec.search.metric not in metrics:
            metrics.append(self.spec.search.metric)
        return params, metrics

    def view_runs(self) -> int:
        """Runs each chart compares: every trial of the launch."""
        return max(10, len(self.expansion.trials) * max(1, self.spec.search.num_samples if self.spec.search.type == "optuna" else 1))

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
                cl.set_tag(run.info.run_id, names.member_tag(self.spec.name), parent)
                for key, value in self.group_of(t.config_hash).items():
                    cl.set_tag(run.info.run_id, key, value)
                continue
            payloads.append(self._payload(t, parent, cl, exp_id, row))
        save_state(self.dir, self.state)
        return payloads

    def _payload(self, t: ExpandedTrial, parent: str, cl, exp_id: str, row: TrialRow) -> TrialPayload:
        run_dir = self.dir.child("trials", t.config_hash)
        run_id, status = None, ""  # an Optuna trial's run is created per Tune trial, inside the trainable
        if self.resume and self.spec.search.type != "optuna":
            run_id, status = resumed_run(cl, self.state["trials"].get(t.config_hash, {}).get("run_id"))
        if status == "FINISHED" and not self.rerun:
            row.status = "skipped"
        if run_id is None and self.spec.search.type == "grid":
            _clear(run_dir)  # a previous launch's checkpoints belong to another run
            run_id = create_child(cl, exp_id, self.spec.name, t, parent, self.group_of(t.config_hash))
        row.run_id = run_id
        self.state["trials"][t.config_hash] = {"run_id": run_id, "name": t.name, "run_dir": str(run_dir)}
        return make_payload(
            self.spec,
            t,
            run_id=run_id,
            run_dir=run_dir,
            parent=parent,
            uri=self.uri,
            judged_by=self.judged_by(),
            group=self.group_of(t.config_hash),
        )

    def judged_by(self) -> list[str]:
        return judged_by(self.spec)


def judged_by(spec: SweepSpec) -> list[str]:
    """The metrics the scheduler and searcher read from every result."""
    out = []
    if spec.scheduler is not None and spec.scheduler.type == "asha":
        out.append(spec.scheduler.metric)
    if spec.search.type == "optuna":
        out.append(spec.search.metric)
    return sorted(set(out))


def _clear(run_dir: Location) -> None:
    """Empty a trial's checkpoint folder (local or on a store)."""
    if run_dir.local is not None:
        if run_dir.local.exists():
            shutil.rmtree(run_dir.local, ignore_errors=True)
    elif run_dir.files():
        run_dir.delete_tree()
