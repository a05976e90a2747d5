"""The RULER-style tasks themselves: NVIDIA/RULER's prompt templates and the builders of one case per task
(needles in a haystack, variable tracking, common and frequent words), deterministic per seed."""

from __future__ import annotations

import functools
import math
import random
import re
import string
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..data.sources import load_shakespeare
from .ruler_words import ADJECTIVES, NOUNS, WORDS

TASKS: tuple[str, ...] = ("niah_single", "niah_multikey", "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe")
HAYSTACKS: tuple[str, ...] = ("noise", "essay")

# ---- RULER scripts/data/synthetic/constants.py (verbatim)
NIAH_TEMPLATE = (
    "Some special magic {type_needle_v} are hidden within the following text. Make sure to memorize it. "
    "I will quiz you about the {type_needle_v} afterwards.\n{context}\n"
    "What are all the special magic {type_needle_v} for {query} mentioned in the provided text?"
)
NIAH_ANSWER_PREFIX = " The special magic {type_needle_v} for {query} mentioned in the provided text are"
VT_TEMPLATE = (
    "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n{context}\n"
    "Question: Find all variables that are assigned the value {query} in the text above."
)
VT_ANSWER_PREFIX = (
    " Answer: According to the chain(s) of variable assignment in the text above, {num_v} variables are assigned "
    "the value {query}, they are: "
)
CWE_TEMPLATE = (
    "Below is a numbered list of words. In these words, some appear more often than others. Memorize the ones "
    "that appear most often.\n{context}\nQuestion: What are the 10 most common words in the above list?"
)
CWE_ANSWER_PREFIX = " Answer: The top 10 words that appear most often in the list are:"
FWE_TEMPLATE = (
    "Read the following coded text and track the frequency of each coded word. Find the three most frequently "
    "appeared coded words. {context}\nQuestion: Do not provide any explanation. Please ignore the dots '....'. "
    "What are the three most frequently appeared words in the above coded text?"
)
FWE_ANSWER_PREFIX = " Answer: According to the coded text above, the three most frequently appeared words are:"

# ---- RULER scripts/data/synthetic/niah.py, variable_tracking.py
NEEDLE = "One of the special magic {type_needle_v} for {key} is: {value}."
NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
DEPTHS: tuple[int, ...] = tuple(int(d) for d in np.round(np.linspace(0, 100, num=40, endpoint=True)).astype(int))
NIAH_SHAPES: dict[str, tuple[int, int, int]] = {  # (num_needle_k, num_needle_v, num_needle_q), synthetic.yaml
    "niah_single": (1, 1, 1),
    "niah_multikey": (4, 1, 1),
    "niah_multivalue": (1, 4, 1),
    "niah_multiquery": (4, 1, 4),
}
VT_HOPS = 4
VT_ICL_TOKENS = 500
CWE_NUM = 10
CWE_LONG = 4096  # RULER switches to the x30 / x3 list from max_seq_length 4096 on
FWE_ALPHA = 2.0
FWE_WORD_LEN = 6


def _essay_words() -> tuple[str, ...]:
    """The installed Shakespeare corpus as words (DataUnavailable when its package is missing)."""
    return tuple(re.sub(r"\s+", " ", " ".join(load_shakespeare())).strip().split(" "))


@functools.lru_cache(maxsize=1)
def _extra_words() -> tuple[str, ...]:
    """Shakespeare's vocabulary (lower case, 3-12 letters, seen twice or more) beyond WORDS, most frequent first."""
    counts = Counter(w for w in re.findall(r"[a-z]+", " ".join(_essay_words()).lower()) if 3 <= len(w) <= 12)
    base = set(WORDS)
    return tuple(w for w, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if c >= 2 and w not in base)


def _split_sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s]


def _haystack_units(haystack: str, size: int) -> tuple[list[str], str]:
    """The haystack as a list of units (noise sentences or essay sentences) and their separator."""
    if haystack == "noise":
        return [NOISE] * size, "\n"
    words = _essay_words()
    if size > len(words):  # RULER repeats the essay when it is too short
        words = words * math.ceil(size / len(words))
    return _split_sentences(" ".join(words[:size])), " "


def _insert(units: list[str], items: Sequence[str], depths: Sequence[int]) -> list[str]:
    """`items` inserted among `units` at sorted `depths` (percent), keeping the items' order."""
    out = list(units)
    positions = [int(len(units) * d / 100) for d in depths]
    for pos, item in reversed(list(zip(positions, items))):  # from the end: earlier positions stay valid
        out.insert(pos, item)
    return out


# ---------------------------------------------------------------- tasks


@dataclass
class _Case:
    """One sample before sizing: `render(size)` builds the prompt for a haystack of `size` units."""

    render: Callable[[int], str]
    references: list[str]
    target: str
    min_size: int
    max_size: int
    depths: tuple[int, ...] = ()
    valid: Callable[[int], bool] = lambda size: True


TokenCount = Callable[[str], int]  # tokens of BOS + text


def _niah(task: str, rng: random.Random, length: int, haystack: str, tag: str, count: TokenCount) -> _Case:
    num_k, num_v, num_q = NIAH_SHAPES[task]
    num_k = max(num_k, num_q)
    key_ids = rng.sample(range(len(ADJECTIVES) * len(NOUNS)), num_k)
    keys = [f"{ADJECTIVES[i // len(NOUNS)]}-{NOUNS[i % len(NOUNS)]}" for i in key_ids]
    flat_values = [str(v) for v in rng.sample(range(10**6, 10**7), num_k * num_v)]
    values = [flat_values[i * num_v : (i + 1) * num_v] for i in range(num_k)]
    needles = [NEEDLE.format(type_needle_v="numbers", key=k, value=v) for k, vs in zip(keys, values) for v in vs]
    rng.shuffle(needles)
    depths = tuple(sorted(rng.sample(DEPTHS, len(needles))))
    asked = rng.sample(range(num_k), num_q)
    queries = [keys[i] for i in asked]
    answers = [v for i in asked for v in values[i]]
    query = ", ".join(queries[:-1]) + ", and " + queries[-1] if len(queries) > 1 else queries[0]
    template, type_needle_v = NIAH_TEMPLATE + NIAH_ANSWER_PREFIX, "numbers"
    if num_q * num_v == 1:  # niah.py: the singular prompt
        template = template.replace("Some", "A").replace("are all", "is").replace("are", "is").replace("answers", "answer")
        type_needle_v = "number"

    def render(size: int) -> str:
        units, sep = _haystack_units(haystack, size)
        context = sep.join(_insert(units, needles, depths))
        return template.format(type_needle_v=type_needle_v, context=context, query=query)

    target = " " + ", ".join(answers) + "."
    return _Case(render, answers, target, min_size=1, max_size=max(length, 1), depths=depths)


def _vt_context(haystack: str, size: int, chain: list[str], depths: Sequence[int]) -> str:
    units, sep = _haystack_units(haystack, size)
    items = chain if haystack == "noise" else [line.strip() + "." for line in chain]
    return sep.join(_insert(units, items, depths)).replace(". \n", ".\n")


def _vt_chain(rng: random.Random, name_len: int) -> tuple[list[str], str, list[str]]:
    names: list[str] = []
    while len(names) < VT_HOPS + 1:
        name = "".join(rng.choices(string.ascii_uppercase, k=name_len))
        if name not in names:
            names.append(name)
    value = str(rng.randint(10000, 99998))  # np.random.randint(10000, 99999): high is exclusive
    chain = [f"VAR {names[0]} = {value}"] + [f"VAR {names[j + 1]} = VAR {names[j]} " for j in range(VT_HOPS)]
    return names, value, chain


def _vt(task: str, rng: random.Random, length: int, haystack: str, tag: str, count: TokenCount) -> _Case:
    template = VT_TEMPLATE + VT_ANSWER_PREFIX
    names, value, chain = _vt_chain(rng, 5)
    depths = tuple(sorted(rng.sample(DEPTHS, len(chain))))
    icl_names, icl_value, icl_chain = _vt_chain(rng, 3)
    icl_depths = tuple(sorted(rng.sample(DEPTHS, len(icl_chain))))

    def icl(size: int) -> str:
        text = template.format(context=_vt_context(haystack, size, icl_chain, icl_depths), query=icl_value, num_v=VT_HOPS + 1)
        return text + " " + " ".join(icl_names) + "\n"

    budget = min(VT_ICL_TOKENS, length // 4)
    icl_size = _largest_fitting(lambda s: count(icl(s)), 0, max(budget, 1), budget) if count(icl(0)) <= budget else 0
    example = icl(icl_size)

    def render(size: int) -> str:
        main = template.format(context=_vt_context(haystack, size, chain, depths), query=value, num_v=VT_HOPS + 1)
        return example + "\n" + main

    return _Case(render, names, " " + " ".join(names), min_size=1, max_size=max(length, 1), depths=depths)


def _numbered(words: Sequence[str]) -> str:
    return " ".join(f"{i + 1}. {w}" for i, w in enumerate(words))


def _cwe(task: str, rng: random.Random, length: int, haystack: str, tag: str, count: TokenCount) -> _Case:
    template = CWE_TEMPLATE + CWE_ANSWER_PREFIX
    if length >= CWE_LONG:
        (fs_words, fs_common, fs_rare), (common_rep, rare_rep) = (40, 10, 3), (30, 3)
    else:
        (fs_words, fs_common, fs_rare), (common_rep, rare_rep) = (20, 3, 1), (6, 1)
    shots = rng.sample(WORDS, fs_words)  # few-shot words, drawn independently of the sample's (as RULER)
    shot_list = shots[:CWE_NUM] * fs_common + shots[CWE_NUM:] * fs_rare
    random.Random(f"{tag}:fewshot").shuffle(shot_list)
    fewshot = template.format(context=_numbered(shot_list)) + " " + _numbered(shots[:CWE_NUM])
    pool = rng.sample(WORDS, len(WORDS))
    common = pool[:CWE_NUM]

    def render(size: int) -> str:
        word_list = common * common_rep + pool[CWE_NUM:size] * rare_rep
        random.Random(f"{tag}:list").shuffle(word_list)
        return fewshot + "\n" + template.format(context=_numbered(word_list))

    if count(render(len(pool))) <= length:  # long context: more distinct words than the built-in lists
        extra = list(_extra_words())
        random.Random(f"{tag}:extra").shuffle(extra)
        pool.extend(extra)
    return _Case(render, common, " " + _numbered(common), min_size=CWE_NUM + 1, max_size=min(max(length, CWE_NUM + 1), len(pool)))


def _zeta(alpha: float, terms: int = 1000) -> float:
    """Riemann zeta(alpha), alpha > 1: a partial sum plus the Euler-Maclaurin tail (error < 1e-12)."""
    k = np.arange(1, terms, dtype=np.float64)
    return float((k**-alpha).sum() + terms ** (1 - alpha) / (alpha - 1) + terms**-alpha / 2 + alpha * terms ** (-alpha - 1) / 12)


def fwe_counts(n: int, vocab_size: int, alpha: float = FWE_ALPHA) -> list[int]:
    """How often each coded word (by rank) is drawn for a text of nominal size n: floor(n k^-alpha / zeta(alpha))."""
    k = np.arange(1, vocab_size + 1, dtype=np.float64)
    return [int(c) for c in (n * k**-alpha / _zeta(alpha))]


def _fwe(task: str, rng: random.Random, length: int, haystack: str, tag: str, count: TokenCount) -> _Case:
    template = FWE_TEMPLATE + FWE_ANSWER_PREFIX
    vocab_size = max(5, length // 50)
    vocab_set: set[str] = set()
    while len(vocab_set) < vocab_size:
        vocab_set.add("".join(rng.choices(string.ascii_lowercase, k=FWE_WORD_LEN)))
    vocab = sorted(vocab_set)
    random.Random(f"{tag}:vocab").shuffle(vocab)
    vocab[0] = "..."  # RULER: the most frequent word is noise
    answers = vocab[1:4]

    def valid(n: int) -> bool:  # the 3 answers are strictly more frequent than every other coded word
        c = fwe_counts(n, vocab_size)
        return c[3] >= 1 and c[3] > c[4]

    def render(n: int) -> str:
        words = [w for w, c in zip(vocab, fwe_counts(n, vocab_size)) for _ in range(c)]
        random.Random(f"{tag}:text").shuffle(words)
        return template.format(context=" ".join(words))

    min_n = next(n for n in range(1, 10_000) if valid(n))
    return _Case(render, answers, " " + " ".join(answers), min_size=min_n, max_size=max(2 * length, min_n), valid=valid)


_BUILDERS: dict[str, Callable[[str, random.Random, int, str, str, TokenCount], _Case]] = {
    **{t: _niah for t in NIAH_SHAPES},
    "vt": _vt,
    "cwe": _cwe,
    "fwe": _fwe,
}


# ---------------------------------------------------------------- sizing


@functools.lru_cache(maxsize=1)
def _largest_fitting(count: Callable[[int], int], lo: int, hi: int, limit: int, guess: int | None = None) -> int:
    """The largest size in [lo, hi] with count(size) <= limit, given count(lo) <= limit (token
    counts grow with the haystack; a bracket from `guess`, then bisection)."""
    memo: dict[int, bool] = {}

    def fits(size: int) -> bool:
        if size not in memo:
            memo[size] = count(size) <= limit
        return memo[size]

    x = min(max(guess if guess is not None else lo, lo), hi)
    fail: int | None = None
    if fits(x):
        best, step = x, max(1, x // 32)
        while best < hi:
            y = min(best + step, hi)
            if not fits(y):
                fail = y
                break
            best, step = y, step * 2
    else:
        best, fail, step = lo, x, max(1, (x - lo) // 32)
        while True:
            y = max(fail - step, lo)
            if y == lo:
                break
            if fits(y):
                best = y
                break
            fail, step = y, step * 2
    return best if fail is None else _boundary(best, fail, fits)


def _boundary(good: int, bad: int, ok: Callable[[int], bool]) -> int:
    """Bisection between a size where `ok` holds and one where it does not (either order): the
    passing size next to the failing side."""
    while abs(bad - good) > 1:
        mid = (good + bad) // 2
        if ok(mid):
            good = mid
        else:
            bad = mid
    return good
