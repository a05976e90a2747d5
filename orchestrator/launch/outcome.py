"""How a launch ended, read back from the store: every trial's outcome (the store is the source
of truth) and the runs settled whose own code could not record their end; the parent closed.

Closing the parent also refreshes the sweep's saved view with the metrics the trials logged
(`orchestrator.tracking.views`); a problem there is a warning on stderr and in
`SweepOutcome.report_error`, never a failed sweep. The comparison report and the parent's
per-configuration metrics come after, from `dashboards.publish` (the CLI's step).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from orchestrator.launch.rows import TrialRow
from orchestrator.launch.runs import SweepRuns
from orchestrator.launch.state import save_state
from orchestrator.launch.summary import summary_markdown
from orchestrator.tracking import client, names, run_outcome, run_state, search_all, views
from orchestrator.tracking.logger import set_tags
from orchestrator.tracking.outcomes import OUTCOME_TAG, REASON_TAG, STOPPED_TAG


@dataclass
class SweepOutcome:
    name: str
    parent_run_id: str
    rows: list[TrialRow]
    wall_s: float
    interrupted: bool = False
    error: str = ""
    """Why the sweep itself could not go on (Ray or Tune refused), if it could not."""
    experiment_id: str = ""
    report_dir: Path | None = None
    """Where the end-of-sweep comparison report was written (None when none was)."""
    report_error: str = ""
    """Why the report, the parent's summary metrics or the saved view could not be written."""
    parent_status: str = ""
    """The status the parent run was closed with (FINISHED, FAILED, KILLED)."""
    reused: bool = False
    """Nothing ran: every trial had finished in the sweep's latest launch, whose parent this is."""

    @property
    def failed(self) -> int:
        return sum(r.status == "failed" for r in self.rows) + bool(self.error)


def sweep_error(err: BaseException) -> str:
    """`SweepOutcome.error` for an exception that stopped the sweep: its type and first line."""
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0][:300] if lines else ''}"


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
        row.member = tags.get(names.member_tag(runs.spec.name)) == parent
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
    if runs.spec.search.type != "optuna":  # reused runs are not children: read them from the rows
        for row in rows:
            if row.run_id and row.run_id not in by_id and row.status == "skipped":
                row.member = True  # tagged by prepare_trials
    return SweepOutcome(runs.spec.name, parent, rows, wall, interrupted, experiment_id=exp_id)


def close_parent(runs: SweepRuns, outcome: SweepOutcome) -> None:
    """Record the launch's counts, reason and summary table on the parent, refresh the sweep's
    saved view, and end the parent (KILLED when interrupted, FAILED when the sweep could not go
    on or every trial failed, else FINISHED). The comparison report is the caller's next step
    (`dashboards.publish`, from the CLI), after the parent is closed, so nothing that happens
    while it is built (a signal, a full disk) can leave the parent RUNNING."""
    cl = client(runs.uri)
    counts: dict[str, int] = {}
    for r in outcome.rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    cl.set_tag(outcome.parent_run_id, names.COUNTS_TAG, json.dumps(counts))
    if outcome.error:
        cl.set_tag(outcome.parent_run_id, REASON_TAG, outcome.error[:4000])
    try:
        cl.log_text(outcome.parent_run_id, summary_markdown(outcome.name, [vars(r) for r in outcome.rows]), names.SUMMARY_ARTIFACT)
    except OSError as err:  # a full disk under the artifact store must not leave the parent RUNNING
        problem = f"{names.SUMMARY_ARTIFACT} could not be written ({err.strerror or err})"
        outcome.report_error = "; ".join(filter(None, [outcome.report_error, problem]))
        print(f"gatesweep: warning: {problem}", file=sys.stderr)
    if outcome.interrupted:
        outcome.parent_status = "KILLED"
    else:
        refresh_view(runs, outcome, cl)
        every_failed = outcome.rows and all(r.status == "failed" for r in outcome.rows)
        outcome.parent_status = "FAILED" if outcome.error or every_failed else "FINISHED"
    cl.set_terminated(outcome.parent_run_id, status=outcome.parent_status)
    save_state(runs.dir, runs.state)


def refresh_view(runs: SweepRuns, outcome: SweepOutcome, cl) -> None:
    """The member tags of every trial of the launch and the saved view with the metrics they
    logged; a failure is said (stderr, `outcome.report_error`), never raised: the trials'
    results are in already."""
    try:
        for row in outcome.rows:
            if row.run_id and not row.member:  # trials of a launch from before member and group tags
                cl.set_tag(row.run_id, names.member_tag(runs.spec.name), outcome.parent_run_id)
                for key, value in runs.group_of(row.config_hash).items():
                    cl.set_tag(row.run_id, key, value)
        logged = {k for r in outcome.rows for k in r.metrics}
        values = {k: [r.metrics[k] for r in outcome.rows if k in r.metrics] for k in logged}
        exp_id = outcome.experiment_id or cl.get_run(outcome.parent_run_id).info.experiment_id
        views.write_sweep_view(
            cl,
            exp_id,
            runs.spec.name,
            search_filter=views.member_filter(runs.spec.name, outcome.parent_run_id),
            axes=runs.view_axes(),
            logged=logged,
            runs=max(runs.view_runs(), len(outcome.rows)),
            group=runs.group,
            values=values,
            parallel=runs.view_parallel(logged),
        )
    except Exception as err:  # the sweep's results are in the store; what is missing is said
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        outcome.report_error = f"{type(err).__name__}: {first[:300]} (the saved view was not written)"
        print(f"[gatesweep] warning: sweep {runs.spec.name}: {outcome.report_error}", file=sys.stderr, flush=True)


def _settle(cl, row: TrialRow, status: str, reason_tag: str = REASON_TAG) -> None:
    """Record the outcome the driver decided for a run nobody else will end (a trial ASHA stopped
    may still be writing the same tags as its actor lets go: `set_tags`)."""
    set_tags(cl, row.run_id, {reason_tag: row.reason, OUTCOME_TAG: row.outcome})
    cl.set_terminated(row.run_id, status=status)
