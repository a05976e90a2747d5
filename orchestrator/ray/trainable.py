"""The Ray Tune trainable: runs inside Ray worker processes, one call per trial (and retry).

It receives a `TrialPayload` (as a dict: the trial config, its MLflow run id and checkpoint
folder), makes it typed on its first line, and calls `run_trial`. A retry calls it again with
the same payload, so it continues the same MLflow run from the newest checkpoint.

Failures follow `tracking/outcomes.py`: a permanent failure (diverged, bad data or config, out of
memory) is recorded in MLflow and the function returns a NaN result for the scheduler's and
searcher's metrics (`judged_by`), so Tune neither retries it nor stops the sweep; a crash raises,
and Tune retries it up to the sweep's `retries`. With `workers > 1` the trial runs across Ray
Train workers (a TorchTrainer built here, the Ray Train V2 pattern); rank 0 logs.
"""

from __future__ import annotations

import copy
import math
import os
from pathlib import Path

from gatedmodels.typedconfig import set_dotted
from orchestrator.ray.cluster import SECRET_ENV, TRACKING_ENV
from orchestrator.ray.payload import TrialPayload
from orchestrator.spec.trial import TrialConfig
from orchestrator.storage import Location
from orchestrator.storage.scratch import scratch_for
from orchestrator.tracking import RunLogger, client, names, views
from orchestrator.tracking.outcomes import OUTCOME_TAG, REASON_TAG, TrialFailed


def _payload_of(config: dict) -> TrialPayload:
    """The trial's payload; for Optuna, the sampled values are written into the arm's config."""
    payload = TrialPayload.from_dict(config["trial"])
    sampled = dict(config.get("space", {}))
    if not sampled:
        return payload
    trial = copy.deepcopy(payload.config)
    for path, value in sampled.items():
        set_dotted(trial, path, value)
    tags = dict(payload.tags)
    for key in [k for k in tags if names.is_group_tag(k)]:  # each sample is a configuration of its own
        tags.update(views.sampled_group(key, tags[key], sampled))
    return payload.replace(config=trial, sampled=sampled, tags=tags)


def _uri(payload: TrialPayload) -> str:
    return os.environ.get(TRACKING_ENV) or payload.tracking_uri


def _scalar_metrics(metrics: dict) -> dict:
    return {
        k: float(v)
        for k, v in metrics.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v)) and "/layer_" not in k
    }


def _failure_report(payload: TrialPayload, step: int) -> dict:
    """What a permanently failed trial reports: the scheduler's and searcher's metrics as NaN,
    so Ray Tune's metric check passes, ASHA ignores the trial and Optuna records it as failed."""
    return {**{m: float("nan") for m in payload.judged_by}, "failed": 1.0, "step": step}


def local_run_dir(payload: TrialPayload) -> tuple[Path, Location | None]:
    """Where the trial works on this node, and its folder on an object store (None for a local
    runs folder): a remote run_dir is worked on in `$GATESWEEP_SCRATCH/SWEEP/trials/HASH[/TUNE_ID]`."""
    loc = payload.run_dir
    if loc.local is not None:
        return loc.local, None
    _, _, tail = loc.path.partition(f"/sweeps/{payload.sweep}/trials/")
    return scratch_for(loc, "sweeps", payload.sweep, "trials", *(tail.split("/") if tail else [loc.name])), loc


def _context(payload: TrialPayload, report, num_threads: int | None):
    from orchestrator.trial.run import TrialContext  # lazy: imports torch (the driver imports this module)

    run_dir, remote = local_run_dir(payload)
    return TrialContext(
        run_dir=run_dir,
        remote_dir=remote,
        tracking_uri=_uri(payload),
        experiment=payload.experiment,
        run_id=payload.run_id,
        run_name=payload.name,
        parent_run_id=payload.parent_run_id,
        tags={names.SWEEP_TAG: payload.sweep, names.TRIAL_NAME_TAG: payload.name, **payload.tags},
        resume=True,
        num_threads=num_threads,
        report=report,
    )


def trainable(config: dict, secrets: dict[str, str] | None = None) -> None:
    """One Tune trial. `secrets` (the unredacted tracking URI, MLflow's credentials) come through
    Ray's object store and are set in this process's environment, where MLflow's client reads them."""
    import ray
    from ray import tune

    from orchestrator.trial.run import run_trial  # lazy: imports torch (the driver imports this module)

    os.environ.update(secrets or {})

    payload = _payload_of(config)
    payload.tags[names.NODE_ID_TAG] = ray.get_runtime_context().get_node_id()
    try:
        cfg = TrialConfig.from_dict(payload.config)
    except ValueError as err:  # an Optuna sample outside the field's domain: recorded, not retried
        if payload.run_id is None:
            payload = _attach_run(payload, None, tune.get_context().get_trial_id())
        _record_config_failure(payload, err)
        tune.report(_failure_report(payload, 0))
        return
    if payload.run_id is None:  # Optuna trials: one run per Tune trial, found again on retry
        payload = _attach_run(payload, cfg, tune.get_context().get_trial_id())
    if payload.workers > 1:
        metrics = _run_distributed(payload)
        if metrics.pop("failed", 0.0):
            tune.report(_failure_report(payload, 0))
            return
        tune.report({"step": cfg.train.steps, **metrics, "failed": 0.0})
        return

    def report(metrics: dict, checkpoint) -> None:
        warnings = {"warnings": " | ".join(metrics["warnings"])} if metrics.get("warnings") else {}
        tune.report({**_scalar_metrics(metrics), "failed": 0.0, **warnings})

    try:
        result = run_trial(cfg, _context(payload, report, int(payload.cpus) or 1))
    except TrialFailed as err:
        if err.permanent:  # recorded in MLflow; a retry would fail the same way
            tune.report(_failure_report(payload, 0))
            return
        raise
    tune.report({**_scalar_metrics(result.metrics), "step": result.steps, "failed": 0.0})


def _record_config_failure(payload: TrialPayload, err: Exception) -> None:
    logger = RunLogger(_uri(payload), payload.run_id, quiet=True)
    logger.set_tags({OUTCOME_TAG: "bad_config", REASON_TAG: f"config: {err}"[:4000]})
    logger.finish("FAILED", wait=30)


def _attach_run(payload: TrialPayload, cfg, trial_id: str) -> TrialPayload:
    """Create (or, on a retry, find) the MLflow child run of an Optuna trial."""
    uri = _uri(payload)
    cl = client(uri)
    exp = cl.get_experiment_by_name(payload.experiment)
    found = cl.search_runs([exp.experiment_id], filter_string=f"tags.`gatesweep.tune_trial_id` = '{trial_id}'", max_results=1)
    name = f"{payload.name}-" + "-".join(
        f"{k.split('.')[-1]}={v:.3g}" if isinstance(v, float) else f"{k.split('.')[-1]}={v}" for k, v in payload.sampled.items()
    )
    if found:
        run_id = found[0].info.run_id
    else:
        tags = {
            names.KIND_TAG: names.TRIAL_KIND,
            names.SWEEP_TAG: payload.sweep,
            names.CONFIG_HASH_TAG: cfg.config_hash() if cfg else "",
            names.TUNE_TRIAL_ID_TAG: trial_id,
            names.TRIAL_NAME_TAG: name,
        }
        run_id = RunLogger.create(uri, payload.experiment, run_name=name, tags=tags, parent_run_id=payload.parent_run_id).run_id
    return payload.replace(run_id=run_id, name=name, run_dir=payload.run_dir.child(trial_id))


def _worker_loop(config: dict) -> None:
    """Runs in each Ray Train worker; the process group already exists."""
    import ray

    from orchestrator.trial.run import run_trial  # lazy: imports torch (the driver imports this module)

    os.environ.update(ray.get(config.pop("secrets")) if "secrets" in config else {})  # an ObjectRef: no secret in Train's config
    payload = TrialPayload.from_dict(config)
    cfg = TrialConfig.from_dict(payload.config)
    try:
        run_trial(cfg, _context(payload, None, int(payload.cpus) or 1))
    except TrialFailed as err:
        if not err.permanent:
            raise


def _secrets() -> dict[str, str]:
    return {k: os.environ[k] for k in (TRACKING_ENV, *SECRET_ENV) if k in os.environ}


def _run_distributed(payload: TrialPayload) -> dict:
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from orchestrator.trial.distributed import BoundTorchConfig  # lazy: imports torch (the driver imports this module)

    gpus = payload.gpus
    trainer = TorchTrainer(
        train_loop_per_worker=_worker_loop,
        train_loop_config={**payload.to_dict(), "secrets": ray.put(_secrets())},
        torch_config=BoundTorchConfig(),  # rank 0's store listens on its node's address only
        scaling_config=ScalingConfig(
            num_workers=payload.workers, use_gpu=gpus > 0, resources_per_worker={"CPU": payload.cpus, **({"GPU": gpus} if gpus else {})}
        ),
        run_config=RunConfig(name=f"{payload.name}-train", storage_path=str(local_run_dir(payload)[0] / "ray_train")),
    )
    trainer.fit()
    run = client(_uri(payload)).get_run(payload.run_id)
    return {**_scalar_metrics(run.data.metrics), "failed": float(run.info.status == "FAILED")}
