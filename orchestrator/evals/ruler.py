"""A RULER-style synthetic long-context suite (Hsieh et al. 2024, NVIDIA/RULER; REFERENCE §3),
deterministic per seed, sized in tokens of the given tokenizer, scored by string match.

Tasks (RULER's `scripts/synthetic.yaml` names in brackets):

| task              | what                                                                      |
|-------------------|---------------------------------------------------------------------------|
| `niah_single`     | one needle, one key, one 7-digit value [niah_single_1/2]                   |
| `niah_multikey`   | four needles with different keys, one asked for [niah_multikey_1]          |
| `niah_multivalue` | four values for the same key, all asked for [niah_multivalue]              |
| `niah_multiquery` | four needles, all four keys asked for [niah_multiquery]                    |
| `vt`              | variable tracking: one chain of 4 hops, with one in-context example [vt]  |
| `cwe`             | common-words extraction: the 10 most common words of a numbered list [cwe] |
| `fwe`             | frequent-words extraction: the 3 most frequent coded words, zeta(2) [fwe]  |

What is taken verbatim from NVIDIA/RULER (checked at commit c3f5e3b of the main branch):
- the prompts and answer prefixes of `scripts/data/synthetic/constants.py` (TASKS: niah,
  variable_tracking, common_words_extraction, freq_words_extraction); the model sees
  template + answer_prefix (`scripts/data/prepare.py`, `scripts/pred/call_api.py`), with the
  "base" model template (no chat wrapping);
- the needle "One of the special magic {type_needle_v} for {key} is: {value}." with
  type_needle_v "numbers" and the singular rewrite of the prompt when one value is asked for
  ('Some'->'A', 'are all'->'is', 'are'->'is', 'answers'->'answer', "numbers"->"number"), 7-digit
  values, the query "k1, k2, and k3" (`scripts/data/synthetic/niah.py`);
- the noise haystack sentence, and DEPTHS = round(linspace(0, 100, 40)) as needle depths;
- variable tracking: 5-letter upper-case names, a 5-digit value, chain lines "VAR X = 12345" /
  "VAR Y = VAR X ", one in-context example with 3-letter names placed before the question and
  answered as prefix + " " + names (`variable_tracking.py`);
- common words: below 4,096 tokens one few-shot example of 20 words (10 common x3, 10 x1) and a
  list with the 10 common words x6 and the others x1; from 4,096 on, 40 words (x10, x3) and
  x30 / x3; items "1. word 2. word ..." (`common_words_extraction.py`);
- frequent words: 6-letter random coded words, vocabulary length // 50, word k drawn
  floor(n k^-2 / zeta(2)) times, the top one replaced by "..." (noise), answers ranks 2-4
  (`freq_words_extraction.py`);
- scoring: RULER's `string_match_all` (fraction of references contained in the prediction,
  case-insensitive) after its `postprocess_pred` (strip, control characters -> newline)
  (`scripts/eval/evaluate.py`, `scripts/eval/synthetic/constants.py`).

Where this suite departs from RULER, and why:
- `length` counts the prompt with its BOS token (the question and answer prefix included); RULER
  also counts `tokens_to_generate` in its length. Generation goes on past `length`.
- word keys are "adjective-noun" from the built-in lists below, not wonderwords' lists (not an
  installed dependency); cwe words come from the same lists (plus Shakespeare's vocabulary past
  577 distinct words, for long contexts); the essay haystack is Shakespeare
  (`orchestrator.data.sources.load_shakespeare`, whitespace-normalised, read from its start as
  RULER reads Paul Graham's essays), split into sentences by a regex instead of nltk;
- items are inserted at sorted depths drawn from DEPTHS for both haystacks (RULER draws uniform
  sentence indices for the noise haystack), and a sample's keys, values, depths and words are drawn
  once from (seed, task, index) and kept while the haystack is sized, so the same seed gives the
  same needles at every length: only the haystack grows;
- the vt in-context example is sized to min(500, length // 4) tokens (RULER: 500 tokens, which
  would not fit CPU lengths) and its chain may sit among fewer than 5 noise lines;
- fwe's vocabulary has at least 5 words, and its size n is lowered until the 3rd and 4th most
  frequent coded words have different counts (at CPU lengths floor() can tie them);
- no QA tasks (they need SQuAD / HotpotQA, which are not installed offline).

A prompt that cannot fit `length` even with the smallest haystack raises ValueError naming the
length it needs (`min_length` computes it): RULER's prompts alone take ~80-450 GPT-2 tokens and
~350-1,700 bytes, so the byte tokenizer needs lengths of 512 and more for most tasks.
"""

from __future__ import annotations

import math
import random
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from orchestrator.evals.ruler_tasks import _BUILDERS, HAYSTACKS, NIAH_SHAPES, NOISE, TASKS, TokenCount, _boundary, _largest_fitting  # noqa: F401 (re-exported)

from ..data.tokenizers import Tokenizer
from .lm import Model, greedy_generate


@dataclass
class Sample:
    """One prompt. `prompt` is the full text the model continues (template + answer prefix);
    `target` is a canonical answer (used to size generation and by oracle tests)."""

    task: str
    length: int
    prompt: str
    references: list[str]
    target: str
    n_tokens: int
    """Tokens of BOS + prompt (<= length)."""
    depths: tuple[int, ...] = ()
    """Depths (percent) at which needles / chain lines were inserted; empty for cwe and fwe."""
    haystack: str = "noise"


@dataclass
class RulerResult:
    """Scores 0-100 per (task, length), their mean per length and overall, and run figures."""

    scores: dict[tuple[str, int], float]
    per_length: dict[int, float]
    average: float
    n: int
    seconds: float
    max_new_tokens: dict[tuple[str, int], int] = field(default_factory=dict)
    predictions: dict[tuple[str, int], list[str]] = field(default_factory=dict)

    def metrics(self, prefix: str = "ruler") -> dict[str, float]:
        """Flat metrics: `{prefix}/{task}/{length}`, `{prefix}/avg/{length}`, `{prefix}/avg`."""
        out = {f"{prefix}/{task}/{length}": s for (task, length), s in self.scores.items()}
        out.update({f"{prefix}/avg/{length}": s for length, s in self.per_length.items()})
        out[f"{prefix}/avg"] = self.average
        out[f"{prefix}/seconds"] = self.seconds
        return out


# ---------------------------------------------------------------- scoring


def postprocess(prediction: str) -> str:
    """RULER's `postprocess_pred`: strip, control characters to newlines, strip."""
    return re.sub(r"[\x00-\x1f]", "\n", prediction.strip()).strip()


def score(prediction: str, references: Sequence[str]) -> float:
    """RULER's `string_match_all` for one sample: the fraction (0-1) of `references` contained
    in `prediction`, case-insensitive."""
    if not references:
        raise ValueError("score needs at least one reference")
    pred = prediction.lower()
    return sum(r.lower() in pred for r in references) / len(references)


# ---------------------------------------------------------------- haystacks


def _token_counter(tokenizer: Tokenizer) -> TokenCount:
    return lambda text: len(tokenizer.encode([text])[0]) + 1  # + BOS


def _check(task: str, haystack: str) -> None:
    if task not in TASKS:
        raise ValueError(f"unknown RULER task {task!r}; allowed: {', '.join(TASKS)}")
    if haystack not in HAYSTACKS:
        raise ValueError(f"unknown haystack {haystack!r}; allowed: {', '.join(HAYSTACKS)}")


def _sized(task: str, length: int, tokenizer: Tokenizer, seed: int, index: int, haystack: str) -> Sample:
    tag = f"ruler:{seed}:{task}:{index}"
    count = _token_counter(tokenizer)
    case = _BUILDERS[task](task, random.Random(tag), length, haystack, tag, count)
    smallest = count(case.render(case.min_size))
    if smallest > length:
        raise ValueError(
            f"RULER {task} at length {length}: the prompt with the smallest haystack already takes {smallest} "
            f"{tokenizer.name} tokens; use a length of at least {smallest} (see ruler.min_length)"
        )
    slope_probe = min(case.min_size + 8, case.max_size)
    per_unit = max((count(case.render(slope_probe)) - smallest) / max(slope_probe - case.min_size, 1), 1e-6)
    guess = case.min_size + int((length - smallest) / per_unit)
    size = _largest_fitting(lambda s: count(case.render(s)), case.min_size, case.max_size, length, guess)
    while not case.valid(size) and size > case.min_size:
        size -= 1
    prompt = case.render(size)
    return Sample(task, length, prompt, list(case.references), case.target, count(prompt), case.depths, haystack)


def make_samples(task: str, length: int, tokenizer: Tokenizer, n: int, seed: int, *, haystack: str = "noise") -> list[Sample]:
    """`n` samples of `task` whose prompts (BOS included) fit `length` tokens of `tokenizer`, with
    as much haystack as fits. Deterministic in (task, length, tokenizer, n, seed, haystack); a
    sample's needles depend on (seed, task, index) only. `haystack`: `noise` (RULER's repeated
    sentences) or `essay` (Shakespeare); cwe and fwe have no haystack and ignore it."""
    _check(task, haystack)
    if length < 1 or n < 0:
        raise ValueError(f"need length >= 1 and n >= 0, got length {length}, n {n}")
    return [_sized(task, length, tokenizer, seed, i, haystack) for i in range(n)]


def min_length(task: str, tokenizer: Tokenizer, *, haystack: str = "noise", seed: int = 0, n: int = 1) -> int:
    """The smallest length at which `make_samples(task, length, tokenizer, n, seed)` succeeds."""
    _check(task, haystack)

    def ok(length: int) -> bool:
        try:
            make_samples(task, length, tokenizer, n, seed, haystack=haystack)
            return True
        except ValueError:
            return False

    hi = 64
    while not ok(hi):
        hi *= 2
        if hi > 1 << 22:
            raise ValueError(f"RULER {task}: no length up to {1 << 22} fits")
    return _boundary(hi, hi // 2, ok)  # hi // 2 fails, or is below the first probe


# ---------------------------------------------------------------- evaluation


def default_max_new_tokens(tokenizer: Tokenizer, samples: Sequence[Sample]) -> int:
    """Enough new tokens for the longest canonical answer of `samples`, plus 25% (at least 4)."""
    longest = max((len(ids) for ids in tokenizer.encode([s.target for s in samples])), default=0)
    return longest + max(4, math.ceil(0.25 * longest))


def run_ruler(
    model: Model,
    tokenizer: Tokenizer,
    *,
    tasks: Sequence[str],
    lengths: Sequence[int],
    n: int,
    seed: int,
    max_new_tokens: int | None = None,
    batch_size: int = 8,
    haystack: str = "noise",
) -> RulerResult:
    """Greedy generation on `n` samples per (task, length), scored by `string_match_all`.

    All samples are built first, so a length too short for a task fails before any model time.
    `max_new_tokens`: per task by default (`default_max_new_tokens`); generation stops early at
    the BOS/EOS id. Scores are 0-100 per (task, length); `per_length` averages the tasks.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    start = time.perf_counter()
    cells = {(task, length): make_samples(task, length, tokenizer, n, seed, haystack=haystack) for length in lengths for task in tasks}
    scores: dict[tuple[str, int], float] = {}
    predictions: dict[tuple[str, int], list[str]] = {}
    budgets: dict[tuple[str, int], int] = {}
    for (task, length), samples in cells.items():
        new = max_new_tokens if max_new_tokens is not None else default_max_new_tokens(tokenizer, samples)
        prompts = [[tokenizer.bos_id, *ids.tolist()] for ids in tokenizer.encode([s.prompt for s in samples])]
        outputs = greedy_generate(
            model, prompts, max_new_tokens=new, max_len=length + new, stop_ids=(tokenizer.bos_id,), batch_size=batch_size
        )
        preds = [postprocess(tokenizer.decode(out)) for out in outputs]
        scores[(task, length)] = 100.0 * float(np.mean([score(p, s.references) for p, s in zip(preds, samples)]))
        predictions[(task, length)] = preds
        budgets[(task, length)] = new
    per_length = {length: float(np.mean([scores[(t, length)] for t in tasks])) for length in lengths}
    return RulerResult(
        scores=scores,
        per_length=per_length,
        average=float(np.mean(list(scores.values()))) if scores else float("nan"),
        n=n,
        seconds=time.perf_counter() - start,
        max_new_tokens=budgets,
        predictions=predictions,
    )
