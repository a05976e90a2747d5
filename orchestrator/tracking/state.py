"""A run's state as gatesweep shows it, from its MLflow status and gatesweep's tags.

| MLflow status | tags                                            | state         |
|---------------|-------------------------------------------------|---------------|
| FINISHED      |                                                 | `finished`    |
| FAILED        | reason in `gatesweep.failure_reason`            | `failed`      |
| KILLED        | `gatesweep.stopped_early` (the scheduler's why) | `stopped`     |
| KILLED        | outcome `interrupted`, or a reason "interrupted…" | `interrupted` |
| KILLED        | anything else                                   | `killed`      |
| RUNNING       |                                                 | `running`     |
| SCHEDULED     |                                                 | `scheduled`   |

The console table, the report and `gatesweep ui` read runs through `run_state`; the launcher
settles the runs whose own code could not record their end (see `orchestrator.launch`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from .names import OUTCOME_TAG, REASON_TAG, STOPPED_TAG

STATES = ("finished", "failed", "stopped", "interrupted", "killed", "running", "scheduled")
"""Every state, in the order tables list them."""
TERMINAL = frozenset({"finished", "failed", "stopped", "interrupted", "killed"})
"""States no trial code will change any more."""


class RunState(NamedTuple):
    """How a run stands; unpacks as `(state, reason)`."""

    state: str
    """One of STATES."""
    reason: str
    """Why it did not finish ("" for finished, running and scheduled runs)."""

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL


def run_state(status: str, tags: Mapping[str, str]) -> RunState:
    """The state and reason of a run with MLflow status `status` and tags `tags`."""
    reason = tags.get(REASON_TAG, "")
    if status == "FINISHED":
        return RunState("finished", "")
    if status == "FAILED":
        return RunState("failed", reason or "failed (no reason recorded)")
    if status == "KILLED":
        if STOPPED_TAG in tags:
            return RunState("stopped", tags[STOPPED_TAG])
        if tags.get(OUTCOME_TAG) == "interrupted" or reason.startswith("interrupted"):
            return RunState("interrupted", reason or "interrupted")
        return RunState("killed", reason or "killed")
    if status == "RUNNING":
        return RunState("running", "")
    return RunState("scheduled", "")


def run_outcome(status: str, tags: Mapping[str, str]) -> str:
    """The outcome (a key of `outcomes.STATUS`) a run recorded, or "" when its end is not recorded
    (running, scheduled, or killed without a reason). A failed run without an outcome tag
    counts as `crashed`."""
    state = run_state(status, tags).state
    if state == "stopped" and tags.get(OUTCOME_TAG) == "not_promoted":
        return "not_promoted"
    if state in ("finished", "stopped", "interrupted"):
        return state
    if state == "failed":
        return tags.get(OUTCOME_TAG) or "crashed"
    return ""
