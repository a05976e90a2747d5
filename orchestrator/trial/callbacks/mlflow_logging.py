"""The trial's MLflow run: opened (or reopened) before anything else can fail, tagged with what
identifies the trial, given the resolved config once the data fixed the vocabulary, fed every
metric point (buffered by RunLogger, which also skips points a resumed run already has), and
closed with how the trial ended (outcomes.py)."""

from __future__ import annotations

import json
import os
import socket

from orchestrator.tracking import RunLogger, git_state, names, package_versions, redact_uri
from orchestrator.tracking.outcomes import OUTCOME_TAG, REASON_TAG, STATUS, STOPPED_TAG
from orchestrator.trial.callbacks.base import Callback


class MLflowLogging(Callback):
    """Main process only. `open()` first; `log_params` after building; `finished()` at the end."""

    def __init__(self, cfg, ctx):
        self.cfg, self.ctx = cfg, ctx
        self.logger: RunLogger | None = None
        self.run_id: str | None = ctx.run_id
        self.trainer = None

    def open(self) -> str:
        cfg, ctx = self.cfg, self.ctx
        tags = {
            names.CONFIG_HASH_TAG: cfg.config_hash(),
            names.RUN_DIR_TAG: str(ctx.run_dir),
            names.GATE_TAG: cfg.model.gate.label,
            names.TASK_TAG: cfg.data.source,
            names.HOST_TAG: socket.gethostname(),
            names.PID_TAG: os.getpid(),
            **{f"version.{k}": v for k, v in package_versions().items()},
            **git_state(),
            **ctx.tags,
        }
        if self.run_id is None:
            name = ctx.run_name or f"{cfg.model.gate.label}-{cfg.model.size}-s{cfg.train.seed}"
            self.logger = RunLogger.create(ctx.tracking_uri, ctx.experiment, run_name=name, tags=tags, parent_run_id=ctx.parent_run_id)
            self.run_id = self.logger.run_id
        else:
            self.logger = RunLogger(ctx.tracking_uri, self.run_id)
            self.logger.set_tags(tags)
        self.logger.client.update_run(self.run_id, status="RUNNING")
        (ctx.run_dir / "run.json").write_text(
            json.dumps({"run_id": self.run_id, "config_hash": cfg.config_hash(), "experiment": ctx.experiment})
        )
        if ctx.on_run is not None:
            ctx.on_run(self.run_id)
        self.logger.set_tags({names.TRACKING_URI_TAG: redact_uri(ctx.tracking_uri)})
        return self.run_id

    def log_params(self, built, world: int) -> None:
        """The full resolved config (known once the data fixed the vocabulary) and the engine's JSON."""
        params = {**self.cfg.flatten(), **{f"model.{k}": v for k, v in built.model_cfg.flatten().items()}}
        params.pop("tracking.uri", None)  # may hold credentials; the tag is redacted
        params.update(
            {
                "data.vocab_size": built.data.vocab_size,
                "world_size": world,
                "model.num_params": built.model.num_params(),
                "model.gate_params": built.model.gate_params(),
            }
        )
        self.logger.log_params(params)
        self.logger.set_tags({names.DEEPSPEED_TAG: json.dumps(built.ds_json)})

    # ---- events ------------------------------------------------------------------------
    def on_start(self, trainer) -> None:
        self.trainer = trainer

    def after_resume(self, trainer) -> None:
        if trainer.resumed_from:
            self.logger.set_tags({names.RESUMED_FROM_TAG: trainer.resumed_from})

    def on_log_interval(self, step: int, metrics: dict) -> None:
        self.logger.log_metrics(metrics, step)

    def on_eval(self, step: int, result) -> None:
        self.logger.log_metrics({**result.metrics, "eval_time_s/periodic": self.trainer.eval_s}, step)

    def on_end(self, step: int, metrics: dict) -> None:
        # the benchmarks and the trial's speed; the evaluation's and the spike counts' points at
        # this step are in the run already (logged when they were made) and skipped
        self.logger.log_metrics(metrics, step)

    def on_failure(self, outcome: str, reason: str, traceback_text: str | None = None) -> None:
        """Record how the trial ended early; never raises (the original error matters more)."""
        if self.logger is None:
            return
        tags = {OUTCOME_TAG: outcome, (STOPPED_TAG if outcome == "stopped" else REASON_TAG): reason[:4000]}
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

    def log_artifact(self, path) -> None:
        self.logger.log_artifact(path)

    def finished(self) -> None:
        self.logger.set_tags({OUTCOME_TAG: "finished"})
        self.logger.finish("FINISHED")
