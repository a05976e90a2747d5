"""A trial's row in a launch: what `launch.runs` fills while it writes the runs and
`launch.outcome` completes from the store at the end (both import it from here)."""

from __future__ import annotations

from dataclasses import dataclass, field


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
    member: bool = False
    """The run carries this launch's member tag (runs of launches before member tags do not)."""
