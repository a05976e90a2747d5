"""One trial: the training loop (trainer.py), its callbacks (callbacks/), the optimizer's pieces
(optim.py), the checkpoint format (checkpoint.py), spike rules, the process group and plots.

`run_trial`, `TrialContext`, `TrialResult`, `FINAL_METRICS` and `TrialFailed` are importable from
here and from `orchestrator.trial.run`; they load on first use, so importing a light submodule
(`orchestrator.trial.spikes`, `.distributed`) does not load torch, DeepSpeed or MLflow.
"""

from __future__ import annotations

_FROM_RUN = ("run_trial", "TrialContext", "TrialResult", "FINAL_METRICS", "TrialFailed")
__all__ = list(_FROM_RUN)


def __getattr__(name: str):
    if name in _FROM_RUN:
        from orchestrator.trial import run  # lazy: torch, DeepSpeed and MLflow load on first use (the docstring)

        return getattr(run, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
