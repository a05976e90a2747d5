"""The metrics a scheduler (ASHA) or a search (Optuna) may compare, and whether a trial reports them."""

from __future__ import annotations

from gatedmodels.configbase import show
from orchestrator.spec.trial import TrialConfig

"""Values of an Optuna `choice` checked against their field."""

# What a trial reports to Ray Tune, the metrics a scheduler (ASHA) or a search (Optuna) can compare.
# Ray checks every reported result for the scheduler's and the search's metric, so a metric must be
# in all of them. One list, kept in step with the code that reports:
# - at every evaluation and in the final result, by every trial (orchestrator/evaluation.py `evaluate`,
#   reported by trial.py `Trainer.run` and tune_trial.py `trainable`):
REPORTED_METRICS = (
    "val_loss",
    "val_ppl",
    "val_bpb",
    "first_token_attn",
    "first_token_attn_uniform",
    "sink_ratio",
    "max_activation",
    "max_activation/peak",
    "max_activation/ratio",
    "value_norm_bos_ratio",
)
# - the same, but only by gated models (`gate_statistics`: not by `none` or the G1 controls):
GATE_METRICS = ("gate_score_mean", "gate_frac_below_1e-2", "gate_frac_below_1e-3")
# - the same, but only on bigram-backcopy data (`BigramBackcopy.task_metrics`):
BIGRAM_METRICS = ("bbc/trigger_loss", "bbc/copy_acc", "bbc/nontrigger_loss", "bbc/optimal_loss", "bbc/trigger_share")
# - only in the final result (trial.py's final metrics, spikes.py's summary, the benchmarks of
#   orchestrator/evals/suite.py when enabled): usable by a search whose trials evaluate only at the end.
FINAL_METRICS = ("loss_spikes", "tokens_per_s", "train_time_s", "mmlu_acc", "mmlu_acc_macro")
FINAL_PREFIXES = ("mmlu/", "ruler_avg/", "ruler/", "ppl/", "bpb/")
"""mmlu/<subject>, ruler_avg/<length>, ruler/<task>/<length>, ppl/<set>, bpb/<set>."""


def metric_problem(metric: str) -> str | None:
    """Why `metric` is not a metric trials report, or None (whether each trial reports it: `_reports`)."""
    if metric in REPORTED_METRICS + GATE_METRICS + BIGRAM_METRICS + FINAL_METRICS or metric.startswith(FINAL_PREFIXES):
        return None
    return (
        f"got {show(metric)}; allowed: {', '.join(REPORTED_METRICS + GATE_METRICS + BIGRAM_METRICS)}; or, reported "
        f"only when a trial ends: {', '.join(FINAL_METRICS)}, {', '.join(p + '...' for p in FINAL_PREFIXES)}"
    )


def _reports(cfg: TrialConfig, metric: str, *, at_every_evaluation: bool) -> str | None:
    """Why a trial would not report `metric` in every result, or None."""
    if metric in REPORTED_METRICS:
        return None
    if metric in GATE_METRICS:
        gated = cfg.model.gate.position != "none" and cfg.model.gate.kind == "gate"
        return None if gated else f"its model has no gate ({cfg.model.gate.label}), so it reports no {metric}"
    if metric in BIGRAM_METRICS:
        return None if cfg.data.source == "bigram-backcopy" else f"its data ({cfg.data.source}) is not bigram-backcopy"
    train = cfg.train
    if at_every_evaluation:
        return f"{metric} is reported only when a trial ends, and the scheduler compares trials at each evaluation"
    if 0 < train.eval_every < train.steps:
        return (
            f"{metric} is reported only when a trial ends, and this trial also reports at every train.eval_every "
            f"({train.eval_every}) steps; set train.eval_every: 0, or compare an evaluation metric such as val_loss"
        )
    ev = cfg.eval
    if metric in ("mmlu_acc", "mmlu_acc_macro") or metric.startswith("mmlu/"):
        subject = metric[len("mmlu/") :] if metric.startswith("mmlu/") else None
        if not ev.mmlu.enabled:
            return "it does not run MMLU (eval.mmlu.enabled)"
        if subject is not None and ev.mmlu.subjects and subject not in ev.mmlu.subjects:
            return f"its eval.mmlu.subjects do not include {subject!r}"
    elif metric.startswith(("ruler_avg/", "ruler/")):
        length = metric.rsplit("/", 1)[1]
        if not ev.ruler.enabled or length not in {str(n) for n in ev.ruler.lengths}:
            return f"it does not run RULER at length {length} (eval.ruler)"
    elif metric.startswith(("ppl/", "bpb/")):
        from orchestrator.spec.evaluation import _set_name

        if metric.split("/", 1)[1] not in {_set_name(s) for s in ev.ppl_sets}:
            return f"{metric.split('/', 1)[1]!r} is not among its eval.ppl_sets"
    return None
