"""The numeric environments a comparison's runs were trained under (`names.NUMERICS_TAG`: the
processor, the instruction set of torch's CPU kernels, threads, torch and its BLAS, the GPU).

Runs of one config and seed repeat bit for bit within one environment; across two, rounding
differs from the first step and training amplifies it, so the same config and seed end apart by
about what two seeds do (measured: docs/training.md, Repeatability). A report whose counted runs
come from more than one environment says so in every format; runs made before gatesweep recorded
the environment are left out of the count, not guessed."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from orchestrator.tracking import names, numerics_label

from .records import RunRecord

GUIDE = "docs/training.md, Repeatability"


@dataclass
class Environment:
    """The counted runs trained under one numeric environment."""

    key: str
    """`names.NUMERICS_KEY_TAG` (keys joined by `+`: a run resumed under another environment)."""
    label: str
    """The environment in a few words (`provenance.numerics_label`)."""
    runs: list[str] = field(default_factory=list)
    """Names of its runs, sorted."""


def environments(runs: Iterable[RunRecord]) -> list[Environment]:
    """The environments of `runs` that recorded one, the largest first."""
    found: dict[str, Environment] = {}
    for r in runs:
        key = r.tags.get(names.NUMERICS_KEY_TAG)
        if not key:
            continue
        env = found.setdefault(key, Environment(key, numerics_label(r.tags.get(names.NUMERICS_TAG, ""))))
        env.runs.append(r.name)
    for env in found.values():
        env.runs.sort()
    return sorted(found.values(), key=lambda e: (-len(e.runs), e.key))


def mixed_note(envs: list[Environment]) -> str | None:
    """One sentence when the runs come from more than one environment (or a run from two), else None."""
    if len(envs) < 2 and not any("+" in e.key for e in envs):
        return None
    return (
        f"the counted runs were trained under {len(envs)} numeric environment{'s' if len(envs) != 1 else ''} "
        "(processor, instruction set, threads, libraries; a `+` key: resumed under another): a config and seed "
        "repeat bit for bit only within one, and across them differ by rounding that training amplifies "
        f"to about the spread between seeds ({GUIDE})"
    )


def run_list(runs: list[str], most: int = 8) -> str:
    """Run names for a table cell: the first `most`, then how many more."""
    shown = ", ".join(runs[:most])
    return shown + (f" and {len(runs) - most} more" if len(runs) > most else "")
