"""The metric registry: every metric gatesweep logs, named once (torch-free).

Each entry says which way is better, how a value prints, the paper's name for it, when a trial
reports it, which trials do, and its roles:

| role        | where it is used                                                          |
|-------------|---------------------------------------------------------------------------|
| `headline`  | the default columns, in registry order: `default_columns`                 |
| `bigram`    | further default columns for Bigram-Backcopy runs (they log `bbc/*`)       |
| `progress`  | the console's evaluation line (`gatesweep run` and `train`)               |
| `final`     | must be in every finished trial's run (for `gated` ones only on gated models) |

One default set of columns, `default_columns(logged)`, serves every table of a sweep's results:
the end-of-sweep table (and `summary.md` on the parent run), `gatesweep report` and
`dashboards.results`.

`when` is `eval` for metrics every evaluation reports (so ASHA can compare trials at each one),
`end` for those only the final result has, and `step` for the training metrics logged every
`train.log_every` steps (MLflow only). `needs` says which trials report a metric: ""
every trial, `gate` gated models only (not `none` nor the G1 controls), `bigram` Bigram-Backcopy
data, `slot` models whose attention kind has a sink slot (softmax1, learned_sink, key_bias), `tasks`/`ruler`/`ppl`/`length` trials that run that benchmark (`tasks`: lm-evaluation-harness tasks,
named `<task>/<metric>` as the harness names them). Families (`ruler_avg/<length>`,
`hellaswag/<metric>`, ...) are registered once by their prefix; a per-layer breakdown
`<metric>/layer_<i>` inherits its metric's entry, and a harness standard error
`<metric>_stderr` its metric's, with no better direction. `eval_time_s/<benchmark>` are the
evaluations' timings, `system/<...>` MLflow's own system metrics (sampled while a trial runs), and
`wsd/<i>/<name>` the points a WSD-S schedule reads at the bottom of each decay but the last
(`val_loss`, `val_bpb`, `tokens`, `train_flops`).

Adding a metric: the probe that computes it, plus one `Metric(...)` line in `REGISTRY`.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Better = Literal["min", "max"] | None
ROLES = ("headline", "bigram", "progress", "final")
WHEN = ("step", "eval", "end")
NEEDS = ("", "gate", "bigram", "slot", "tasks", "ruler", "ppl", "length")


@dataclass(frozen=True)
class Metric:
    """One metric (or, with `prefix=True`, a family of metrics sharing a prefix)."""

    name: str
    """The MLflow metric key (for a family, its prefix ending in `/`)."""
    label: str
    """Short column header (terminal tables)."""
    better: Better
    """`min`: lower is better; `max`: higher is better; None: neither (the gate score)."""
    when: Literal["step", "eval", "end"]
    """`step`: logged every `train.log_every` steps, never reported to Tune; `eval`: in every
    evaluation's report; `end`: in the final result only."""
    needs: str = ""
    """Which trials report it (see the module docstring); "" every trial."""
    roles: frozenset[str] = frozenset()
    paper: str = ""
    """The paper's name for it (Qiu et al. 2025 and the sink papers), "" when it has none."""
    fmt: str = ".4g"
    """Format spec of one value in console lines."""
    prefix: bool = False

    def format(self, value: float) -> str:
        """One value as console lines print it."""
        return format(value, self.fmt) if math.isfinite(value) else str(value)


def _m(
    name: str,
    label: str,
    better: Better,
    when: Literal["step", "eval", "end"],
    *roles: str,
    needs: str = "",
    paper: str = "",
    fmt: str = ".4g",
    prefix: bool = False,
) -> Metric:
    return Metric(name, label, better, when, needs, frozenset(roles), paper, fmt, prefix)


HARNESS_TASKS = ("hellaswag", "mmlu", "arc_easy", "arc_challenge", "piqa", "winogrande", "lambada_openai", "sciq", "gsm8k")
"""lm-evaluation-harness tasks (orchestrator.evals.harness_data.TASKS); `mmlu_` covers MMLU's groups and subjects."""
HARNESS_BPB_TASKS = ("hellaswag", "arc_easy", "arc_challenge", "piqa", "sciq")

REGISTRY: tuple[Metric, ...] = (
    _m("val_loss", "loss", "min", "eval", "bigram", "progress", "final", paper="loss", fmt=".4f"),
    _m("val_ppl", "PPL", "min", "eval", "headline", "final", paper="PPL"),
    _m("val_bpb", "bpb", "min", "eval", "final", paper="bits per byte"),
    _m("hellaswag/acc_norm", "HellaSwag", "max", "end", "headline", needs="tasks", paper="HellaSwag"),
    _m("mmlu/acc", "MMLU", "max", "end", "headline", needs="tasks", paper="MMLU"),
    _m("gsm8k/exact_match/strict-match", "GSM8k", "max", "end", "headline", needs="tasks", paper="GSM8k"),
    _m("lambada_openai/perplexity", "LAMBADA PPL", "min", "end", needs="tasks", paper="LAMBADA perplexity"),
    _m("first_token_attn", "F-Attn", "min", "eval", "headline", "progress", "final", paper="F-Attn", fmt=".3f"),
    _m("first_token_attn_uniform", "F-Attn unif.", None, "eval", paper="uniform first-token attention"),
    _m(
        "first_token_share",
        "F-share",
        "min",
        "eval",
        paper="first token's share of the real-key attention (= F-Attn for softmax)",
        fmt=".3f",
    ),
    _m(
        "sink_slot_mass",
        "sink slot",
        None,
        "eval",
        needs="slot",
        paper="attention on a sink slot (softmax1, learned sink, key bias)",
        fmt=".3f",
    ),
    _m("sink_ratio", "sink", "min", "eval", "headline", "progress", "final", paper="Sink_0^0.3", fmt=".2f"),
    _m("max_activation", "M-Act", "min", "eval", "headline", "final", paper="M-Act"),
    _m("max_activation/peak", "M-Act peak", "min", "eval", paper="largest activation"),
    _m("max_activation/ratio", "M-Act ratio", "min", "eval", paper="largest over median activation"),
    _m("bbc/trigger_loss", "trig.loss", "min", "eval", "bigram", needs="bigram", paper="loss on trigger positions"),
    _m("bbc/copy_acc", "copy", "max", "eval", "bigram", needs="bigram", paper="copy accuracy"),
    _m("bbc/nontrigger_loss", "non-trig.loss", "min", "eval", needs="bigram"),
    _m("bbc/optimal_loss", "opt.loss", None, "eval", needs="bigram", paper="Bayes-optimal loss"),
    _m("bbc/trigger_share", "trig.share", None, "eval", needs="bigram"),
    _m("value_norm_bos_ratio", "v-BOS", None, "eval", "bigram", paper="value norm at BOS"),
    _m(
        "gate_score_mean",
        "gate-score",
        None,
        "eval",
        "headline",
        "progress",
        "final",
        needs="gate",
        paper="gate score",
        fmt=".3f",
    ),
    _m("gate_frac_below_1e-2", "gate<1e-2", None, "eval", needs="gate"),
    _m("gate_frac_below_1e-3", "gate<1e-3", None, "eval", needs="gate"),
    _m("gate_frac_below_0.1", "gate<0.1", None, "eval", needs="gate", paper="share of gate scores below 0.1 (closed)", fmt=".3f"),
    _m("gate_frac_above_1", "gate>1", None, "eval", needs="gate", paper="share of gate scores above 1 (unbounded gates)", fmt=".3f"),
    _m("loss_spikes", "spikes", "min", "end", "headline", "final", paper="loss spikes"),
    _m("loss_spikes/sigma", "spikes (sigma)", "min", "end", paper="loss spikes by the sigma rule"),
    _m("loss_spikes/ema", "spikes (EMA)", "min", "end", paper="loss spikes by the EMA rule"),
    _m("grad_norm_spikes", "grad spikes", "min", "end", paper="gradient-norm spikes"),
    _m("tokens_per_s", "tok/s", "max", "end", "headline", "final", paper="throughput"),
    _m("train_time_s", "train s", None, "end"),
    _m("first_step_s", "first step s", None, "end"),
    _m("train_flops", "train FLOPs", None, "end", "final", paper="training compute (FLOPs, gate included)", fmt=".3g"),
    _m("flops_per_token", "FLOPs/token", None, "end", paper="training FLOPs per token", fmt=".3g"),
    _m("params", "params", None, "end", paper="parameters", fmt=".4g"),
    _m("params_non_embedding", "params (non-emb.)", None, "end", paper="non-embedding parameters", fmt=".4g"),
    _m("train/loss", "train loss", "min", "step", paper="training loss"),
    _m("train/loss_max", "train loss max", "min", "step"),
    _m("train/grad_norm", "grad norm", None, "step"),
    _m("train/lr", "lr", None, "step"),
    _m("train/tokens_per_s", "train tok/s", "max", "step"),
    _m("train/tokens_seen", "tokens", None, "step"),
    *(_m(f"{task}/", task, "max", "end", needs="tasks", prefix=True) for task in HARNESS_TASKS),
    *(_m(f"{task}_bpb/", f"{task} bpb", "min", "end", needs="tasks", prefix=True) for task in HARNESS_BPB_TASKS),
    _m("mmlu_", "MMLU", "max", "end", needs="tasks", prefix=True),
    _m("harness/", "harness", None, "end", needs="tasks", prefix=True),
    _m("wsd/", "WSD-S point", None, "end", prefix=True),
    _m("ruler_avg/", "RULER", "max", "end", "headline", needs="ruler", paper="RULER", prefix=True),
    _m("ruler/", "RULER", "max", "end", needs="ruler", prefix=True),
    _m("ppl/", "PPL", "min", "end", needs="ppl", prefix=True),
    _m("length_loss/", "loss@len", "min", "end", needs="length", paper="held-out loss at a longer length", prefix=True),
    _m("length_copy/", "copy@len", "max", "end", needs="length", paper="copy accuracy at a longer length", prefix=True),
    _m("length_excess/", "excess@len", "min", "end", needs="length", paper="loss above the optimum at a longer length", prefix=True),
    _m("bpb/", "bpb", "min", "end", needs="ppl", prefix=True),
    _m("eval_time_s/", "eval s", None, "end", prefix=True),
    _m("system/", "system", None, "step", prefix=True),
)
"""Fixed metrics first, in column order; then the families."""

_BY_NAME = {m.name: m for m in REGISTRY}
_LAYER = re.compile(r"^(.+)/layer_(\d+)$")


def select(role: str | None = None, *, when: str | None = None, needs: str | None = None, families: bool = False) -> tuple[Metric, ...]:
    """Registry entries with `role`, reported `when`, by trials that `needs` ("" for every
    trial), in registry order; families only with `families=True`."""
    assert role is None or role in ROLES, role
    assert when is None or when in WHEN, when
    assert needs is None or needs in NEEDS, needs
    return tuple(
        m
        for m in REGISTRY
        if m.prefix == families
        and (role is None or role in m.roles)
        and (when is None or m.when == when)
        and (needs is None or m.needs == needs)
    )


def names(role: str | None = None, *, when: str | None = None, needs: str | None = None) -> tuple[str, ...]:
    """Names of the fixed metrics `select` picks: `names("final")`, `names(when="eval", needs="")`."""
    return tuple(m.name for m in select(role, when=when, needs=needs))


def prefixes(role: str | None = None, *, when: str | None = None) -> tuple[str, ...]:
    """Prefixes of the families: `prefixes(when="end")` -> ("mmlu/", "ruler_avg/", ...)."""
    return tuple(m.name for m in select(role, when=when, families=True))


def get(name: str) -> Metric:
    """The entry of a fixed metric; KeyError for anything else."""
    m = _BY_NAME[name]
    if m.prefix:
        raise KeyError(name)
    return m


def lookup(key: str) -> Metric | None:
    """The entry a logged key belongs to: itself, its metric for `<metric>/layer_<i>` or
    `<metric>_stderr` (without a better direction), or its family (longest prefix first); None for
    a key the registry does not know."""
    if key.endswith("_stderr"):
        base = lookup(key[: -len("_stderr")])
        return None if base is None else dataclasses.replace(base, name=key, better=None, roles=frozenset(), prefix=False)
    m = _BY_NAME.get(key)
    if m is not None and not m.prefix:
        return m
    layer = _LAYER.match(key)
    if layer and layer.group(1) in _BY_NAME and not _BY_NAME[layer.group(1)].prefix:
        return _BY_NAME[layer.group(1)]
    fams = [f for f in REGISTRY if f.prefix and key.startswith(f.name) and len(key) > len(f.name)]
    return max(fams, key=lambda f: len(f.name)) if fams else None


def default_columns(logged: Iterable[str]) -> list[str]:
    """The default metric columns of a sweep's results, one set for the end-of-sweep table, the
    report and `dashboards.results`: the `headline` metrics some run logged (registry order),
    then, for Bigram-Backcopy runs (they log `bbc/*`), the `bigram` ones, then the members of the
    headline families (`ruler_avg/<length>`) by family and length."""
    present = set(logged)
    keys = [k for k in names("headline") if k in present]
    if present.intersection(names(when="eval", needs="bigram")):
        keys += [k for k in names("bigram") if k in present and k not in keys]
    families = prefixes("headline")
    members = [k for k in present if k.startswith(families) and k not in families]
    return keys + sorted(members, key=lambda k: _member_key(k, families))


def _member_key(key: str, families: tuple[str, ...]) -> tuple[int, float, str]:
    """Family members by family, then by length (numbers), then by name."""
    family = next(i for i, f in enumerate(families) if key.startswith(f))
    tail = key[len(families[family]) :]
    try:
        return family, float(tail), key
    except ValueError:
        return family, math.inf, key


def progress_parts(values: dict[str, float]) -> list[str]:
    """["val_loss 1.7981", "first_token_attn 0.062", ...]: the progress metrics `values` has."""
    return [f"{m.name} {m.format(float(values[m.name]))}" for m in select("progress") if m.name in values]
