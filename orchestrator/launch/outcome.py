"""How a launch ended, read back from the store: every trial's outcome (the store is the source
of truth) and the runs settled whose own code could not record their end; the parent closed."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dashboards.summary import summary_markdown
from orchestrator.launch.state import save_state
from orchestrator.tracking import client, names, run_outcome, run_state, search_all
from orchestrator.tracking.outcomes import OUTCOME_TAG, REASON_TAG, STOPPED_TAG

if TYPE_CHECKING:
    from orchestrator.launch.runs import SweepRuns


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


def collect(
    runs: SweepRuns, parent: str, wall: float, interrupted: bool, stopped: dict[str, int], errors: dict[str, str], error: str = ""
) -> SweepOutcome:
    """Read every trial's final state from MLflow (the source of truth) and settle the runs
    whose own code could not record their end: trials the scheduler stopped (decided here,
    by ASHA's own decisions, not by the timing of the trial's last write), trials interrupted
    with the driver, and trials whose worker died until retries ran out."""
    cl = client(runs.uri)
    exp_id = cl.get_experiment_by_name(runs.experiment).experiment_id
    children = search_all(cl, [exp_id], f"tags.`mlflow.parentRunId` = '{parent}'")
    by_id = {r.info.run_id: r for r in children}
    rows = list(runs.rows.values())
    if runs.spec.search.type == "optuna":
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
                _settle(cl, row, "KILLED", STOPPED_TAG)
        elif (state := run_state(status, tags)).state in ("failed", "stopped"):
            row.status, row.reason, row.outcome = state.state, state.reason, run_outcome(status, tags)
        elif interrupted or error or state.state == "interrupted":
            row.status, row.outcome = "interrupted", "interrupted"
            why = "interrupted" if interrupted or not error else f"not run to the end: the sweep stopped ({error[:200]})"
            row.reason = f"{why}; `gatesweep resume {runs.spec.name}` continues it"
            if status != "KILLED":
                _settle(cl, row, "KILLED")
        else:  # RUNNING / SCHEDULED with nobody left to finish it: the worker died, retries ran out
            last = errors.get(key, "")
            row.status, row.outcome = "failed", "crashed"
            row.reason = "the trial's worker died and retries ran out" + (f" (last error: {last})" if last else "")
            _settle(cl, row, "FAILED")
    return SweepOutcome(runs.spec.name, parent, rows, wall, interrupted)


def close_parent(runs: SweepRuns, outcome: SweepOutcome) -> None:
    cl = client(runs.uri)
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
    save_state(runs.dir, runs.state)


def _settle(cl, row: TrialRow, status: str, reason_tag: str = REASON_TAG) -> None:
    """Record the outcome the driver decided for a run nobody else will end."""
    cl.set_tag(row.run_id, reason_tag, row.reason)
    cl.set_tag(row.run_id, OUTCOME_TAG, row.outcome)
    cl.set_terminated(row.run_id, status=status)
