"""Ray Tune set-up for a sweep: the Tuner over the trial payloads (a grid, or Optuna within one grid
arm), ASHA that records its own stops, an Optuna searcher that records failed trials as failed,
and the console progress callback. Imported only when a sweep launches (it imports Ray)."""

from __future__ import annotations

import time
from pathlib import Path

from ray import tune
from ray.tune import Callback
from ray.tune.logger import JsonLoggerCallback

from orchestrator.core import metrics
from orchestrator.ray import trainable as trainable_mod
from orchestrator.ray.payload import TrialPayload
from orchestrator.ray.progress import work_of
from orchestrator.spec.search import numeric_bounds


def build_tuner(
    spec,
    payloads: list[TrialPayload],
    *,
    max_t: int,
    storage: Path,
    concurrency: int,
    retries: int,
    board,
    stopped: dict,
    errors: dict,
    arm: TrialPayload | None = None,
    secrets: dict[str, str] | None = None,
) -> tune.Tuner:
    """A Tuner over `payloads` (grid), or over Optuna samples of one grid `arm` (here, at the Ray
    boundary, the payloads become plain dicts: `TrialPayload.to_dict`). `board` is the
    sweep's progress (`orchestrator.ray.progress.SweepProgress`); `stopped` and `errors` are
    filled as the sweep runs: the trials ASHA stopped, and Tune's last error lines. `secrets`
    (`RayCluster.trial_secrets`) reach each trial through Ray's object store (`with_parameters`),
    not its config or a runtime_env, so no Ray log or Tune file holds them."""
    res = spec.resources
    if res.workers_per_trial > 1:
        resources = {"cpu": 0.01}  # the TorchTrainer's workers reserve the real resources
    else:
        resources = {"cpu": res.cpus_per_worker, "gpu": res.gpus_per_worker}
    trainable = tune.with_resources(tune.with_parameters(trainable_mod.trainable, secrets=dict(secrets or {})), resources)
    scheduler = None
    if spec.scheduler is not None and spec.scheduler.type == "asha":
        scheduler = recording_asha(stopped)(
            time_attr="step",
            metric=spec.scheduler.metric,
            mode=spec.scheduler.mode,
            grace_period=spec.scheduler.grace_period,
            max_t=max_t,
            reduction_factor=spec.scheduler.reduction_factor,
        )
    common = dict(scheduler=scheduler, reuse_actors=True, max_concurrent_trials=concurrency, trial_dirname_creator=lambda tr: tr.trial_id)
    if arm is None:
        names = {p.config_hash: p.name for p in payloads}
        param_space = {"trial": tune.grid_search([p.to_dict() for p in payloads])}
        tune_cfg = tune.TuneConfig(trial_name_creator=lambda tr: names.get(tr.config["trial"]["config_hash"], tr.trial_id), **common)
    else:
        import optuna
        from ray.tune.search.optuna import OptunaSearch

        s = spec.search
        sampler = optuna.samplers.TPESampler(seed=s.seed) if s.sampler == "tpe" else optuna.samplers.RandomSampler(seed=s.seed)
        param_space = {"trial": arm.to_dict(), "space": {path: tune_distribution(d) for path, d in s.space.items()}}
        search = failure_aware(OptunaSearch)(metric=s.metric, mode=s.mode, sampler=sampler)
        tune_cfg = tune.TuneConfig(
            search_alg=search, num_samples=s.num_samples, trial_name_creator=lambda tr: f"{arm.name}-{tr.trial_id[-5:]}", **common
        )
    run_cfg = tune.RunConfig(
        name=f"{spec.name}-{arm.name if arm else 'grid'}-{int(time.time())}",
        storage_path=str(storage),
        failure_config=tune.FailureConfig(max_failures=retries),
        verbose=0,
        # Tune's own result files: JSON only (its analysis at the end reads it, and warns per trial
        # without one); the CSV and TensorBoard ones are off (`RayCluster.start`)
        callbacks=[Progress(board, errors, stopped), JsonLoggerCallback()],
    )
    return tune.Tuner(trainable, param_space=param_space, tune_config=tune_cfg, run_config=run_cfg)


def tune_distribution(dist: dict):

    kind, args = next(iter(dist.items()))
    if kind == "choice":
        return tune.choice(args)
    lo, hi = numeric_bounds(args)
    if kind == "loguniform":
        return tune.loguniform(lo, hi)
    if kind == "uniform":
        return tune.uniform(lo, hi)
    return tune.randint(int(lo), int(hi) + 1)


def trial_key(trial) -> str:
    """The key a Tune trial is known by on both sides: its config hash (grid) or Tune trial id (Optuna)."""
    cfg = getattr(trial, "config", None) or {}
    if "space" in cfg:  # an Optuna trial: one run per Tune trial, tagged with the Tune trial id
        return trial.trial_id
    return (cfg.get("trial") or {}).get("config_hash") or trial.trial_id


def recording_asha(stopped: dict):
    """ASHAScheduler that also writes down each early stop it decides (trial key -> step), so the
    driver knows which trials were stopped however their workers' last writes went."""
    from ray.tune.schedulers import ASHAScheduler, TrialScheduler

    class RecordingASHA(ASHAScheduler):
        def on_trial_result(self, tune_controller, trial, result):
            action = super().on_trial_result(tune_controller, trial, result)
            if action == TrialScheduler.STOP and not result.get("failed"):
                stopped[trial_key(trial)] = int(result.get("step", 0))
            return action

    return RecordingASHA


def failure_aware(searcher_cls):
    """A searcher that records a permanently failed trial (its result has failed=1) as failed
    (Optuna's FAIL state), not as a value."""

    class FailureAware(searcher_cls):
        def on_trial_complete(self, trial_id, result=None, error=False):
            if result and result.get("failed"):
                return super().on_trial_complete(trial_id, None, error=True)
            return super().on_trial_complete(trial_id, result, error)

    return FailureAware


class Progress(Callback):
    """Feeds Tune's events to the sweep's progress board (`orchestrator.ray.progress`): start,
    every result (its step; the registry's progress metrics at evaluations), completion, error,
    retry, and a tick on every loop of Tune's controller. `stopped` is the scheduler's record
    (`recording_asha`), `errors` collects each crashed trial's last error line."""

    def __init__(self, board, errors: dict, stopped: dict | None = None):
        self.board, self.errors = board, errors
        self.stopped = stopped if stopped is not None else {}

    @staticmethod
    def _name(trial) -> str:
        return getattr(trial, "custom_trial_name", None) or str(trial)

    def on_trial_start(self, iteration, trials, trial, **info):

        cfg = getattr(trial, "config", None) or {}
        payload = TrialPayload.from_dict(cfg["trial"])
        key = None if "space" in cfg else payload.config_hash
        work = work_of(payload, cfg.get("space"), key=key)
        work.name = self._name(trial)
        self.board.start(trial.trial_id, work)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if result.get("warnings"):
            self.board.say(f"warning {self._name(trial)}: {result['warnings']}")
        if result.get("failed"):
            return
        self.board.report(trial.trial_id, int(result.get("step", 0)), "  ".join(metrics.progress_parts(result)))

    def on_trial_complete(self, iteration, trials, trial, **info):
        failed = (trial.last_result or {}).get("failed")
        outcome = "failed" if failed else "stopped" if trial_key(trial) in self.stopped else "done"
        self.board.end(trial.trial_id, outcome)

    def on_trial_error(self, iteration, trials, trial, **info):
        self.errors[trial_key(trial)] = first_line(trial)
        self.board.end(trial.trial_id, "failed", first_line(trial))

    def on_trial_recover(self, iteration, trials, trial, **info):
        self.board.retry(trial.trial_id, first_line(trial))

    def on_step_end(self, iteration, trials, **info):
        self.board.tick()


def first_line(trial) -> str:
    path = getattr(trial, "error_file", None)
    try:
        text = Path(path).read_text() if path else ""
    except OSError:
        text = ""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:200] if lines else "error"
