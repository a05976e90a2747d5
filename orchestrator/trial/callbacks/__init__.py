"""Trainer callbacks, one concern each (see base.py for the events):

- checkpoint.Checkpointer   save/load through the engine, COMPLETE after the step's points, prune
- spikes.SpikeMonitor       loss/grad-norm spike rules, counts in the metrics, state in checkpoints
- speed.Speed               tokens/s per log window and for the trial (step 1 left out)
- step_metrics.StepMetrics  train/loss, loss_max, grad_norm, lr, tokens_seen per log window
- mlflow_logging.MLflowLogging  the MLflow run: params, tags, metrics, how the trial ended
- tune_report.TuneReport    `ctx.report` after each intermediate evaluation, store flushed first
- console.Console           `ctx.progress` lines
- artifacts.Artifacts       config.yaml, deepspeed.json, spikes.json, probes.json, plots, model.pt
- benchmarks.Benchmarks     MMLU / RULER-style / perplexity sets on the final weights
"""

from orchestrator.trial.callbacks.base import Callback

__all__ = ["Callback"]
