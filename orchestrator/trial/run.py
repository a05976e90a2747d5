"""One trial: TrialConfig -> data -> GatedTransformer -> DeepSpeed engine -> the training loop
(trainer.py) with its callbacks (callbacks/) -> one MLflow run with every paper metric.

`run_trial(cfg, ctx)` is what `gatesweep train` calls directly and what each Ray Tune trial calls
in its worker. Everything a trial needs to find its state again (checkpoint folder, MLflow run id)
is in `TrialContext`, so a retried or resumed trial continues where it stopped, in the same run.
"""

from __future__ import annotations

import functools
import os
import random
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gatedmodels import GatedTransformer
from orchestrator.core import metrics as registry
from orchestrator.data import DataUnavailable, build_trial_data
from orchestrator.evals.heldout import evaluate
from orchestrator.spec.trial import TrialConfig
from orchestrator.storage.location import Location
from orchestrator.tracking.outcomes import TrialFailed, classify
from orchestrator.trial.callbacks import benchmarks
from orchestrator.trial.callbacks.artifacts import Artifacts
from orchestrator.trial.callbacks.checkpoint import Checkpointer
from orchestrator.trial.callbacks.compute import Compute
from orchestrator.trial.callbacks.console import Console
from orchestrator.trial.callbacks.decay_points import DecayPoints
from orchestrator.trial.callbacks.mlflow_logging import MLflowLogging
from orchestrator.trial.callbacks.speed import Speed
from orchestrator.trial.callbacks.spikes import SpikeMonitor
from orchestrator.trial.callbacks.step_metrics import StepMetrics
from orchestrator.trial.callbacks.tune_report import TuneReport
from orchestrator.trial.checkpoint import load_weights_only
from orchestrator.trial.distributed import import_deepspeed, process_group
from orchestrator.trial.optim import lr_lambda, optimizer, param_groups
from orchestrator.trial.trainer import Trainer

__all__ = ["FINAL_METRICS", "TrialContext", "TrialFailed", "TrialResult", "build", "lr_lambda", "make_trainer", "param_groups", "run_trial"]

FINAL_METRICS = registry.names("final")
"""Metrics every finished trial has (orchestrator/core/metrics.py)."""


@dataclass
class TrialContext:
    """Where and how a trial runs (not part of its config hash)."""

    run_dir: Path
    """Absolute folder for checkpoints, the final weights and artifacts staged for MLflow (with
    `remote_dir`: the local scratch copy of that folder)."""
    tracking_uri: str
    """Absolute MLflow tracking URI."""
    experiment: str = "gatesweep"
    run_id: str | None = None
    """Continue this MLflow run (retries, resumes, runs pre-created by a sweep)."""
    run_name: str | None = None
    parent_run_id: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    remote_dir: Location | None = None
    """The trial's folder on an object store, the truth `run_dir` is synchronised with:
    checkpoints downloaded on start and uploaded as they are saved, run.json, model.pt and the
    artifacts uploaded (`orchestrator.trial.checkpoint`)."""
    resume: bool = True
    """Continue from the newest checkpoint in run_dir when there is one."""
    num_threads: int | None = None
    report: Callable[[dict, Path | None], None] | None = None
    """Called after each evaluation with the metrics and the newest checkpoint folder (Ray Tune)."""
    progress: Callable[[str], None] | None = None
    """Receives one human-readable line per log interval (the CLI prints them)."""
    on_run: Callable[[str], None] | None = None
    """Called with the MLflow run id as soon as the run exists (to find it again on resume)."""


@dataclass
class TrialResult:
    run_id: str
    metrics: dict[str, float]
    steps: int
    wall_s: float
    train_s: float
    resumed_from: int = 0


@dataclass
class Built:
    """What `build` made: the data, the model config with the data's vocabulary, the engine."""

    data: Any
    model_cfg: Any
    engine: Any
    ds_json: dict
    val_batches: list
    device: torch.device

    @property
    def model(self) -> GatedTransformer:
        return self.engine.module


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def compile_engine(engine) -> None:
    """torch.compile the engine's module in place (parameter names unchanged). A compiler that
    cannot run (no C++ toolchain, an unsupported op) falls back to eager with one warning."""
    import warnings

    import torch._dynamo

    torch._dynamo.config.suppress_errors = True  # a compile failure runs the frame eagerly instead of failing the trial
    try:
        engine.compile()
    except Exception as err:  # DeepSpeed and dynamo raise many types; the trial still trains
        warnings.warn(f"train.compile: torch.compile is unavailable here ({type(err).__name__}: {err}); training eagerly", stacklevel=2)


def build(cfg: TrialConfig, world: int = 1) -> Built:
    """Data, model, optimizer and DeepSpeed engine. Each stage's failure is classified
    (outcomes.classify): bad data and configs DeepSpeed refuses are permanent, not retried."""
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    seed_everything(cfg.train.seed)
    with _stage("data"):
        try:
            data = build_trial_data(cfg.data, cfg.train.seed)
        except DataUnavailable as err:
            raise TrialFailed(f"data: {err}", kind="bad_data") from None
    with _stage("model"):
        model_cfg = cfg.model.replace(vocab_size=data.vocab_size)
        torch.manual_seed(cfg.train.seed)
        model = GatedTransformer(model_cfg)
        opt, scheduler = optimizer(model, cfg.train)
    with _stage("deepspeed"):
        ds_json = cfg.deepspeed.to_json(cfg.train, on_gpu=device.type == "cuda", world_size=world)
        engine, _, _, _ = import_deepspeed().initialize(model=model, optimizer=opt, lr_scheduler=scheduler, config=ds_json)
        load_weights_only(engine)
        model.checkpoint_blocks = cfg.train.activation_checkpointing == "blocks"
        if cfg.train.compile:
            compile_engine(engine)
    with _stage("data"):
        val_batches = data.val_batches(cfg.eval.batches, cfg.eval.batch_size)
    return Built(data, model_cfg, engine, ds_json, val_batches, device)


def make_trainer(
    cfg: TrialConfig, ctx: TrialContext, built: Built, *, rank: int = 0, world: int = 1, tracker: MLflowLogging | None = None
) -> Trainer:
    """The loop and its callbacks, in the order they run (callbacks/base.py): state first, then
    metric producers, then the MLflow run (before the console prints and the artifacts are
    written), then the console and Ray Tune. Logging, console, artifacts and benchmarks are the
    main process's."""
    main = rank == 0
    remote = ctx.remote_dir
    spikes = SpikeMonitor(cfg.train, rank=rank, world=world)
    which = benchmarks.selected(cfg.eval) if main else ()
    console = Console(ctx.progress, cfg.train.steps) if main and ctx.progress is not None else None
    callbacks = [
        Checkpointer(
            ctx.run_dir,
            resume=ctx.resume,
            keep=cfg.train.keep_checkpoints,
            config_hash=cfg.config_hash(),
            is_main=main,
            tracker=tracker,
            remote=remote,
            say=ctx.progress,
        ),
        StepMetrics(),
        benchmarks.Benchmarks(cfg, built.model, built.data, which, device=built.device, progress=console.say if console else None)
        if which
        else None,
        spikes,
        Speed(),
        Compute(built.model_cfg, cfg.data.seq_len),
        DecayPoints(cfg.train, built.model_cfg, cfg.data.seq_len) if cfg.train.schedule == "wsd_s" else None,
        tracker,
        Artifacts(cfg, built, spikes.detector, ctx.run_dir, tracker, remote=remote) if tracker is not None else None,
        console,
        TuneReport(ctx.report, ctx.run_dir, tracker) if ctx.report is not None else None,
    ]
    periodic = functools.partial(evaluate, built.model, built.data, built.val_batches, cfg.eval, device=built.device)
    return Trainer(
        cfg.train,
        built.engine,
        built.data,
        periodic,
        [cb for cb in callbacks if cb is not None],
        rank=rank,
        world=world,
        device=built.device,
        seq_len=cfg.data.seq_len,
    )


def trial_threads(cfg: TrialConfig, ctx: TrialContext) -> int:
    """Torch's CPU threads for the trial: `train.threads`; else the CPUs it was given (a Ray
    trial's); else OMP_NUM_THREADS when it is set (the usual knob where processes share the
    cores: batch schedulers, parallel test runs; more threads than free cores spin-wait, several
    times slower on a small model); else every core this process may use."""
    from_env = os.environ.get("OMP_NUM_THREADS", "").strip()
    env = int(from_env) if from_env.isdigit() else 0
    return max(1, cfg.train.threads or ctx.num_threads or env or len(os.sched_getaffinity(0)))


def run_trial(cfg: TrialConfig, ctx: TrialContext) -> TrialResult:
    """Train and evaluate one trial; raise TrialFailed (after recording it) when it cannot finish.

    The MLflow run is opened before anything else can fail, so every ending (outcomes.py) is
    recorded in it: status, `gatesweep.outcome`, and the reason."""
    ctx.run_dir = Path(ctx.run_dir).resolve()
    ctx.run_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(trial_threads(cfg, ctx))
    with process_group() as (rank, world), torch.enable_grad():
        tracker = MLflowLogging(cfg, ctx) if rank == 0 else None
        run_id = tracker.open() if tracker is not None else ctx.run_id
        trainer: Trainer | None = None
        try:
            built = build(cfg, world)
            if tracker is not None:
                tracker.log_params(built, world)
            trainer = make_trainer(cfg, ctx, built, rank=rank, world=world, tracker=tracker)
            metrics = trainer.run()
        except SystemExit:  # Ray Tune stops a trial (e.g. ASHA) by raising SystemExit in report()
            _ended(trainer, tracker, "stopped", f"stopped by the scheduler at step {trainer.step if trainer else 0}")
            raise
        except KeyboardInterrupt:
            _ended(trainer, tracker, "interrupted", "interrupted")
            raise
        except BaseException as err:
            failed = classify(err, "train")
            failed.run_id = run_id
            _ended(
                trainer,
                tracker,
                failed.kind,
                failed.reason,
                None if isinstance(err, TrialFailed) else "".join(traceback.format_exception(err)),
            )
            if failed is err:
                raise
            raise failed from err
        if tracker is not None:
            tracker.finished()
        return TrialResult(run_id or "", metrics, trainer.step, trainer.wall_s, trainer.train_s, trainer.resumed_from)


def _ended(trainer: Trainer | None, tracker: MLflowLogging | None, outcome: str, reason: str, traceback_text: str | None = None) -> None:
    """Tell the callbacks (before the trainer exists: the MLflow run) how the trial ended early;
    never raises (the original error matters more)."""
    callbacks = trainer.callbacks if trainer is not None else [tracker] if tracker is not None else []
    for cb in callbacks:
        try:
            cb.on_failure(outcome, reason, traceback_text)
        except Exception:
            pass


class _stage:
    """`with _stage("data"):` turns any exception into the classified TrialFailed of that stage."""

    def __init__(self, name: str):
        self.name = name

    def __enter__(self):
        return self

    def __exit__(self, tp, err, tb):
        if err is None or not isinstance(err, Exception) or isinstance(err, TrialFailed):
            return False
        raise classify(err, self.name) from err
