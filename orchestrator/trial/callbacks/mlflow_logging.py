"""The trial's MLflow run: opened (or reopened) before anything else can fail, tagged with what
identifies the trial, given the resolved config once the data fixed the vocabulary, fed every
metric point (buffered by RunLogger, which also skips points a resumed run already has), and
closed with how the trial ended (outcomes.py).

MLflow's own features where they fit: the trial's data as dataset inputs (training and
validation splits, `orchestrator.tracking.inputs`), system metrics sampled while the run is open
(`orchestrator.trial.system_metrics`), and the trained weights as the artifact `model/model.pt`
(the file `gatesweep train` and the export path read; skipped above
`names.MAX_WEIGHTS_ARTIFACT_BYTES`, with a tag saying so)."""

from __future__ import annotations

import json
import os
import socket

from orchestrator import storage
from orchestrator.data.sources import OFFLINE_CORPORA
from orchestrator.storage.retry import retried
from orchestrator.tracking import RunLogger, git_state, inputs, names, numerics, numerics_tags, package_versions, redact_uri
from orchestrator.tracking.outcomes import OUTCOME_TAG, REASON_TAG, STATUS, STOPPED_TAG
from orchestrator.trial.callbacks.base import Callback, TrainerView
from orchestrator.trial.system_metrics import SystemMetrics


def run_tags(cfg, ctx) -> dict:
    """What a trial's run is tagged with when it opens: config hash, folder, gate, task, host and
    process, the numeric environment (after the trial set its threads), package versions, the git
    state, and the launcher's tags."""
    return {
        names.KIND_TAG: names.TRIAL_KIND,
        names.CONFIG_HASH_TAG: cfg.config_hash(),
        names.RUN_DIR_TAG: str(ctx.remote_dir or ctx.run_dir),
        names.GATE_TAG: cfg.model.gate.label,
        names.TASK_TAG: cfg.data.source,
        names.HOST_TAG: socket.gethostname(),
        names.PID_TAG: os.getpid(),
        **numerics_tags(numerics()),
        **{f"version.{k}": v for k, v in package_versions().items()},
        **git_state(),
        **ctx.tags,
    }


def run_params(cfg, built, world: int) -> dict:
    """The full resolved config (known once the data fixed the vocabulary), without the tracking
    URI (it may hold credentials; its tag is redacted) and the gate's fields that do not apply
    (an ungated run has no granularity), and the model's size."""
    params = {**cfg.flatten(), **{f"model.{k}": v for k, v in built.model_cfg.flatten().items()}}
    params.pop("tracking.uri", None)
    for name in built.model_cfg.gate.unused_fields():
        params.pop(f"model.gate.{name}", None)
    params.update(
        {
            "data.vocab_size": built.data.vocab_size,
            "world_size": world,
            "model.num_params": built.model.num_params(),
            "model.gate_params": built.model.gate_params(),
        }
    )
    return params


class MLflowLogging(Callback):
    """Main process only. `open()` first; `log_params` after building; `finished()` at the end."""

    def __init__(self, cfg, ctx):
        self.cfg, self.ctx = cfg, ctx
        self.logger: RunLogger | None = None
        self.run_id: str | None = ctx.run_id
        self.trainer = None
        self.system: SystemMetrics | None = None
        self.before: dict[str, str] | None = None
        """A reopened run's tags before this process touched them."""

    def open(self) -> str:
        cfg, ctx = self.cfg, self.ctx
        tags = run_tags(cfg, ctx)
        if self.run_id is None:
            name = ctx.run_name or f"{cfg.model.gate.label}-{cfg.model.size}-s{cfg.train.seed}"
            self.logger = RunLogger.create(ctx.tracking_uri, ctx.experiment, run_name=name, tags=tags, parent_run_id=ctx.parent_run_id)
            self.run_id = self.logger.run_id
        else:
            self.logger = RunLogger(ctx.tracking_uri, self.run_id)
            # the numeric environment once it is known whether this run continues a checkpoint
            self.before = self.logger.existing_tags
            self.logger.set_tags({k: v for k, v in tags.items() if k not in (names.NUMERICS_TAG, names.NUMERICS_KEY_TAG)})
        self.logger.client.update_run(self.run_id, status="RUNNING")
        # the store too (credentials redacted), so that commands on the trial's folder log where its run is
        record = {
            "run_id": self.run_id,
            "config_hash": cfg.config_hash(),
            "experiment": ctx.experiment,
            "tracking_uri": redact_uri(ctx.tracking_uri),
        }
        storage.write_json(ctx.run_dir / "run.json", record)
        if ctx.remote_dir is not None:  # the runs folder is on an object store: run.json there too
            remote = ctx.remote_dir.child("run.json")
            retried(lambda: remote.write_json(record), f"writing {remote}")
        if ctx.on_run is not None:
            ctx.on_run(self.run_id)
        self.logger.set_tags({names.TRACKING_URI_TAG: redact_uri(ctx.tracking_uri)})
        self.system = SystemMetrics(self.run_id, ctx.tracking_uri)
        self.system.start()
        return self.run_id

    def log_params(self, built, world: int) -> None:
        """The full resolved config (known once the data fixed the vocabulary) and the engine's JSON."""
        self.logger.log_params(run_params(self.cfg, built, world))
        self.logger.set_tags({names.DEEPSPEED_TAG: json.dumps(built.ds_json)})
        try:
            self.logger.log_inputs(data_inputs(self.cfg.data, built.data))
        except Exception as err:  # a data set the UI cannot describe is no reason to stop training
            self.logger._warn(f"dataset input not logged: {type(err).__name__}: {err}")

    # ---- events ------------------------------------------------------------------------
    def on_start(self, trainer: TrainerView) -> None:
        self.trainer = trainer

    def after_resume(self, trainer: TrainerView) -> None:
        """A run that continues a checkpoint made under another numeric environment is marked mixed;
        one that starts over (a retry before its first checkpoint) is this environment's."""
        if self.before is not None:
            self.logger.set_tags(numerics_tags(numerics(), self.before if trainer.resumed_from else None))
        if trainer.resumed_from:
            self.logger.set_tags({names.RESUMED_FROM_TAG: trainer.resumed_from})

    def on_log_interval(self, step: int, metrics: dict) -> None:
        self.logger.log_metrics(metrics, step)

    def on_eval(self, step: int, result) -> None:
        self.logger.log_metrics({**result.metrics, "eval_time_s/periodic": self.trainer.eval_s}, step)
        if result.warnings:  # NaN probe metrics: say why where the run is read
            self.logger.set_tags({names.EVAL_WARNINGS_TAG: f"step {step}: " + "; ".join(result.warnings)})

    def on_end(self, step: int, metrics: dict) -> None:
        # the benchmarks and the trial's speed; the evaluation's and the spike counts' points at
        # this step are in the run already (logged when they were made) and skipped
        self.logger.log_metrics(metrics, step)

    def on_failure(self, outcome: str, reason: str, traceback_text: str | None = None) -> None:
        """Record how the trial ended early; never raises (the original error matters more)."""
        if self.logger is None:
            return
        tags = {OUTCOME_TAG: outcome, (STOPPED_TAG if outcome == "stopped" else REASON_TAG): reason[:4000]}
        self.stop_system_metrics()
        try:
            self.logger.set_tags(tags)
            if traceback_text:
                self.logger.log_text(traceback_text, "failure_traceback.txt")
            self.logger.finish(STATUS[outcome], wait=30)
        except Exception:
            pass

    # ---- for the other callbacks and run_trial -----------------------------------------
    def flush(self, wait: float = 0.0) -> bool:
        return self.logger.flush(wait=wait)

    def pop_warnings(self) -> list[str]:
        return self.logger.pop_warnings()

    def log_artifact(self, path, artifact_path: str | None = None) -> None:
        self.logger.log_artifact(path, artifact_path)

    def log_weights(self, path) -> None:
        """The trained weights file as `model/model.pt`, unless larger than the limit (then a tag)."""
        size = path.stat().st_size
        if size > names.MAX_WEIGHTS_ARTIFACT_BYTES:
            self.logger.set_tags(
                {
                    names.WEIGHTS_SKIPPED_TAG: f"{size / 2**20:.0f} MiB > {names.MAX_WEIGHTS_ARTIFACT_BYTES / 2**20:.0f} MiB; "
                    f"the weights are at {path} (tag {names.RUN_DIR_TAG})"
                }
            )
            return
        self.logger.log_artifact(path, names.WEIGHTS_DIR)

    def stop_system_metrics(self) -> None:
        if self.system is not None:
            self.system.stop()
            self.system = None

    def finished(self) -> None:
        self.stop_system_metrics()
        self.logger.set_tags({OUTCOME_TAG: "finished"})
        self.logger.finish("FINISHED")


def data_inputs(cfg, data) -> list:
    """The trial's training and validation data as MLflow dataset inputs."""
    profile = {**data.describe(), "seq_len": cfg.seq_len}
    prepared = getattr(data, "prepared", None)
    if prepared is not None:  # a text corpus: the token cache's key decides the tokens
        digest = prepared.folder.name
        train = {k: v for k, v in profile.items() if not k.startswith("val_")}
        val = {k: v for k, v in profile.items() if not k.startswith("train_")}
        profiles = {"training": train, "validation": val}
        settings = None
    else:  # synthetic: its settings and the window length decide the data (the seed orders it)
        settings = {**cfg.bigram.to_dict(), "seq_len": cfg.seq_len}
        digest = inputs.settings_digest(settings)
        profiles = {"training": profile}
    kind, source = inputs.source_of(cfg.source, hf_split=cfg.hf_split, settings=settings, corpora=tuple(OFFLINE_CORPORA))
    return inputs.dataset_inputs(cfg.source, digest, kind, source, profiles)
