"""How a trial ends: one table, one owner.

Every way a trial can end maps to one *outcome* with one MLflow status and one recorded reason
(tag `gatesweep.failure_reason`, or `gatesweep.stopped_early` for a scheduler stop), shown the
same way in the console table, the MLflow UI and the report:

| outcome        | MLflow status | retried by Tune | examples                                                  |
|----------------|---------------|-----------------|-----------------------------------------------------------|
| finished       | FINISHED      | -               | trained and evaluated                                     |
| diverged       | FAILED        | no              | NaN/inf loss                                              |
| bad_data       | FAILED        | no              | missing corpus, empty or binary file, corrupt tokenizer   |
| bad_config     | FAILED        | no              | a sampled config that does not validate, DeepSpeed refusal|
| out_of_memory  | FAILED        | no              | MemoryError, CUDA OOM                                     |
| disk           | FAILED        | no              | a checkpoint or artifact that cannot be written           |
| crashed        | FAILED        | yes (`retries`) | an unexpected exception, a killed worker, a lost node     |
| stopped        | KILLED        | no              | ASHA stopped it; every metric it logged is kept           |
| not_promoted   | KILLED        | no              | a ladder's promotion stopped its arm before this rung     |
| interrupted    | KILLED        | on `resume`     | Ctrl-C, SIGTERM or SIGHUP to the driver                   |

Only `crashed` is worth a retry: the others would fail the same way again. A trial that fails
permanently still reports the scheduler's and searcher's metric (as NaN) so ASHA and Optuna go on;
Optuna records it as a failed trial.
"""

from __future__ import annotations

from .names import OUTCOME_TAG, REASON_TAG, STOPPED_TAG

__all__ = ["OUTCOME_TAG", "REASON_TAG", "RETRIED", "STATUS", "STOPPED_TAG", "TrialFailed", "classify", "is_out_of_memory"]

STATUS = {
    "finished": "FINISHED",
    "diverged": "FAILED",
    "bad_data": "FAILED",
    "bad_config": "FAILED",
    "out_of_memory": "FAILED",
    "disk": "FAILED",
    "crashed": "FAILED",
    "stopped": "KILLED",
    "not_promoted": "KILLED",
    "interrupted": "KILLED",
}
RETRIED = frozenset({"crashed"})


class TrialFailed(RuntimeError):
    """A trial stopped for a reason worth reporting; `kind` is its outcome (a key of STATUS)."""

    def __init__(self, reason: str, run_id: str | None = None, *, kind: str = "crashed"):
        assert kind in STATUS and STATUS[kind] == "FAILED", kind
        super().__init__(reason)
        self.reason, self.run_id, self.kind = reason, run_id, kind

    @property
    def permanent(self) -> bool:
        """Retrying cannot help (as opposed to a crash worth a retry)."""
        return self.kind not in RETRIED


def is_out_of_memory(err: BaseException) -> bool:
    if isinstance(err, MemoryError):
        return True
    text = f"{type(err).__name__}: {err}".lower()
    return (
        "outofmemory" in text.replace(" ", "")
        or "out of memory" in text
        or "can't allocate memory" in text
        or "cannot allocate memory" in text
    )


def classify(err: BaseException, stage: str) -> TrialFailed:
    """The TrialFailed for an exception raised in `stage` (data, tokenizer, model, deepspeed,
    train, evaluate, ...). Exceptions while building a trial are permanent (the same inputs fail
    the same way); an unexpected exception while training is a crash, retried."""
    if isinstance(err, TrialFailed):
        return err
    text = f"{type(err).__name__}: {str(err).strip()}"[:2000]
    if is_out_of_memory(err):
        return TrialFailed(f"out of memory in {stage}: {text}", kind="out_of_memory")
    if stage == "data":
        return TrialFailed(f"data: {text}", kind="bad_data")
    if stage in ("config", "model", "deepspeed"):
        return TrialFailed(f"{stage}: {text}", kind="bad_config")
    return TrialFailed(f"{stage}: {text}", kind="crashed")
