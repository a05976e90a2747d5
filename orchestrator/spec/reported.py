"""The metrics a scheduler (ASHA) or a search (Optuna) may compare, and whether a trial reports them."""

from __future__ import annotations

from gatedmodels.typedconfig import did_you_mean, show
from orchestrator.core import metrics
from orchestrator.spec.evaluation import _set_name
from orchestrator.spec.trial import TrialConfig

# What a trial reports to Ray Tune: a scheduler (ASHA) or a search (Optuna) must compare a metric every
# result has. From the registry (orchestrator/core/metrics.py), by when trials report them and which do:
REPORTED_METRICS = metrics.names(when="eval", needs="")
"""At every evaluation and in the final result, by every trial."""
GATE_METRICS = metrics.names(when="eval", needs="gate")
"""The same, but only by gated models (not by `none` or the G1 controls)."""
BIGRAM_METRICS = metrics.names(when="eval", needs="bigram")
"""The same, but only on bigram-backcopy data."""
SLOT_METRICS = metrics.names(when="eval", needs="slot")
"""The same, but only by attention kinds with a sink slot (softmax1, learned_sink, key_bias)."""
SLOT_KINDS = ("softmax1", "learned_sink", "key_bias")
FINAL_METRICS = metrics.names(when="end")
"""Only in the final result: usable by a search whose trials evaluate only at the end."""
FINAL_PREFIXES = metrics.prefixes(when="end")
"""<harness task>/<metric>, ruler_avg/<length>, ruler/<task>/<length>, ppl/<set>, bpb/<set>, length_loss/<extend>/<length>, ..."""


def metric_problem(metric: str) -> str | None:
    """Why `metric` is not a metric trials report, or None (whether each trial reports it: `_reports`)."""
    if metric in REPORTED_METRICS + GATE_METRICS + BIGRAM_METRICS + SLOT_METRICS + FINAL_METRICS or metric.startswith(FINAL_PREFIXES):
        return None
    known = [*REPORTED_METRICS, *GATE_METRICS, *BIGRAM_METRICS, *SLOT_METRICS, *FINAL_METRICS]
    return (
        f"got {show(metric)}{did_you_mean(metric, known)}; allowed: {', '.join(REPORTED_METRICS + GATE_METRICS + BIGRAM_METRICS + SLOT_METRICS)}; or, reported "
        f"only when a trial ends: {', '.join(FINAL_METRICS)}, {', '.join(p + '...' for p in FINAL_PREFIXES)}"
    )


def _reports(cfg: TrialConfig, metric: str, *, at_every_evaluation: bool) -> str | None:
    """Why a trial would not report `metric` in every result, or None."""
    if metric in REPORTED_METRICS:
        return None
    if metric in GATE_METRICS:
        gated = cfg.model.gate.position != "none" and cfg.model.gate.kind == "gate"
        return None if gated else f"its model has no gate ({cfg.model.gate.label}), so it reports no {metric}"
    if metric in SLOT_METRICS:
        kind = cfg.model.attention.kind
        return None if kind in SLOT_KINDS else f"its attention kind ({kind}) has no sink slot"
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
    entry = metrics.lookup(metric)
    if entry is not None and entry.needs == "tasks" and not metric.startswith("harness/"):
        task = metric.split("/", 1)[0]
        names = ev.tasks.names
        mmlu_run = task.startswith("mmlu") and any(n == "mmlu" or n == task for n in names)
        if task not in names and not mmlu_run:
            return f"it does not run the harness task {task!r} (eval.tasks.names)"
    elif metric.startswith(("ruler_avg/", "ruler/")):
        length = metric.rsplit("/", 1)[1]
        if not ev.ruler.enabled or length not in {str(n) for n in ev.ruler.lengths}:
            return f"it does not run RULER at length {length} (eval.ruler)"
    elif entry is not None and entry.needs == "length":
        _, extend, length = (metric.split("/") + ["", ""])[:3]
        lc = ev.length
        if extend not in lc.extend or length not in {str(n) for n in lc.lengths}:
            return f"it does not evaluate at length {length or '?'} with extension {extend or '?'} (eval.length)"
        if entry.name != "length_loss/" and cfg.data.source != "bigram-backcopy":
            return f"its data ({cfg.data.source}) is not bigram-backcopy, so it reports no {entry.name}..."
    elif metric.startswith(("ppl/", "bpb/")) and metric.split("/", 1)[1] not in {_set_name(s) for s in ev.ppl_sets}:
        return f"{metric.split('/', 1)[1]!r} is not among its eval.ppl_sets"
    return None
