"""The trial config: what one training run is. `gatesweep train FILE` reads it; a sweep's `base`
section has the same schema, and every expanded sweep trial is one of these.

Every field is bounded where a value would overflow, hang or fail much later (`LIMITS`, see
`gatedmodels.typedconfig`); local paths are made absolute against the folder of the file that
names them (`resolve_paths`), since Ray runs trials in other working directories; and
`environment_problems` checks what depends on this machine (data that must be readable here).

A trial is identified by its config hash: the SHA-256 of the canonical JSON of the sections that
change results (model, data, train, deepspeed, eval), with the gate and the attention kind
normalised so that two configs building the same model hash alike. Tracking settings do not enter the hash.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gatedmodels import ModelConfig
from gatedmodels.typedconfig import Config, ConfigError, Issue, Limits, set_dotted, show
from orchestrator.core.bounds import MAX_LEN
from orchestrator.spec.data import DataConfig
from orchestrator.spec.evaluation import EvalConfig, cache_problem
from orchestrator.spec.paths import resolve_value
from orchestrator.spec.train import DeepSpeedConfig, TrainConfig


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
    LIMITS = Limits(
        {
            "model.d_model": (1, 65_536),
            "model.n_layers": (1, 1024),
            "model.n_heads": (1, 1024),
            "model.n_kv_heads": (1, 1024),
            "model.head_dim": (1, 4096),
            "model.ffn_dim": (1, MAX_LEN),
            "model.max_seq_len": (1, MAX_LEN),
            "model.init_std": (0, None),
            "model.rope.factor": (None, 1_000_000),
            "model.rope.original_max_len": (1, MAX_LEN),
            "model.moe.n_experts": (0, 4096),
            "model.moe.expert_dim": (None, MAX_LEN),
            "model.moe.aux_loss_coef": (0, None),
        }
    )

    def problems(self) -> list[Issue]:
        out = []
        learned = self.model.position_encoding == "learned"
        if learned and self.data.seq_len > self.model.max_seq_len:
            out.append(
                Issue(
                    "data.seq_len", f"got {self.data.seq_len}; learned positions allow at most model.max_seq_len ({self.model.max_seq_len})"
                )
            )
        if learned and self.eval.tasks.names and self.eval.tasks.max_len > self.model.max_seq_len:
            out.append(
                Issue(
                    "eval.tasks.max_len",
                    f"got {self.eval.tasks.max_len}; learned positions allow at most model.max_seq_len ({self.model.max_seq_len})",
                )
            )
        evaluated = {
            "eval.ruler.lengths": self.eval.ruler.lengths if self.eval.ruler.enabled else [],
            "eval.length.lengths": self.eval.length.lengths,
        }
        for path, lengths in evaluated.items():  # the end-of-trial evaluations at other lengths
            for i, length in enumerate(lengths):
                if learned and length > self.model.max_seq_len:
                    out.append(
                        Issue(f"{path}[{i}]", f"got {length}; learned positions allow at most model.max_seq_len ({self.model.max_seq_len})")
                    )
        if self.eval.length.lengths and self.model.position_encoding != "rope" and set(self.eval.length.extend) - {"none"}:
            out.append(
                Issue(
                    "eval.length.extend",
                    f"got {self.eval.length.extend}; yarn and base extend RoPE, and this model has "
                    f"position_encoding {self.model.position_encoding} (allowed: [none])",
                )
            )
        if self.model.norm_eps <= 0:
            out.append(Issue("model.norm_eps", f"got {self.model.norm_eps}; allowed: > 0"))
        rope = self.model.rope  # YaRN (trained with it, or RULER's extension) needs beta_fast > beta_slow > 0
        if not 0 < rope.beta_slow < rope.beta_fast:
            out.append(
                Issue("model.rope.beta_slow", f"got {rope.beta_slow} with beta_fast {rope.beta_fast}; allowed: 0 < beta_slow < beta_fast")
            )
        if self.eval.probe_sequences > self.eval.batch_size * self.eval.batches:
            out.append(Issue("eval.probe_sequences", f"got {self.eval.probe_sequences}; allowed: <= eval.batches * eval.batch_size"))
        text_only = {
            "eval.tasks.names": bool(self.eval.tasks.names),
            "eval.ruler.enabled": self.eval.ruler.enabled,
            "eval.ppl_sets": bool(self.eval.ppl_sets),
        }
        if self.data.source == "bigram-backcopy":
            for path, on in text_only.items():
                if on:
                    out.append(Issue(path, "needs a text data source with a tokenizer; bigram-backcopy has neither"))
        if problem := cache_problem(self.model.attention.kind, self.eval):
            out.append(Issue("model.attention.kind", problem))
        return out

    def config_hash(self) -> str:
        """SHA-256 over the canonical JSON of each hashed section (sections cache their JSON,
        so the trials of a sweep, which share section objects, hash quickly)."""
        cached = self.__dict__.get("_hash_cache")
        if cached is None:
            parts = [f"{k}={_section_json(self, k)}" for k in self.HASHED]
            cached = hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]
            object.__setattr__(self, "_hash_cache", cached)
        return cached


SECTIONS: dict[str, type[Config]] = {
    "model": ModelConfig,
    "data": DataConfig,
    "train": TrainConfig,
    "deepspeed": DeepSpeedConfig,
    "eval": EvalConfig,
}
"""The sections of a trial config a sweep's axes set (a dotted path starts with one: `model.gate.position`)."""


def _section_json(cfg: TrialConfig, name: str) -> str:
    section = getattr(cfg, name)
    cached = section.__dict__.get("_json_cache")
    if cached is None:
        if name == "model":
            section = section.replace(gate=section.gate.normalized(), attention=section.attention.normalized())
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
