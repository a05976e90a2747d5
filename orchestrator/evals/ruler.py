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

import functools
import math
import random
import re
import string
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..data.tokenizers import Tokenizer
from .lm import Model, greedy_generate

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

# ---- built-in word lists (keys "adjective-noun"; cwe words are their union with VERBS)
ADJECTIVES: tuple[str, ...] = tuple(
    [
        "able",
        "acid",
        "angry",
        "ancient",
        "awake",
        "bitter",
        "black",
        "blue",
        "bold",
        "brave",
        "bright",
        "broad",
        "broken",
        "brown",
        "busy",
        "calm",
        "careful",
        "cheap",
        "chief",
        "clean",
        "clear",
        "clever",
        "cold",
        "common",
        "cool",
        "crisp",
        "cruel",
        "curly",
        "damp",
        "dark",
        "deep",
        "dense",
        "dry",
        "dusty",
        "eager",
        "early",
        "easy",
        "empty",
        "equal",
        "exact",
        "faint",
        "fair",
        "false",
        "famous",
        "fancy",
        "fast",
        "fierce",
        "fine",
        "firm",
        "flat",
        "fond",
        "foolish",
        "fresh",
        "friendly",
        "full",
        "funny",
        "gentle",
        "giant",
        "glad",
        "golden",
        "good",
        "grand",
        "gray",
        "great",
        "green",
        "happy",
        "hard",
        "heavy",
        "hidden",
        "high",
        "hollow",
        "honest",
        "huge",
        "humble",
        "hungry",
        "icy",
        "jolly",
        "keen",
        "kind",
        "large",
        "late",
        "lazy",
        "light",
        "little",
        "lively",
        "lonely",
        "long",
        "loud",
        "lovely",
        "low",
        "lucky",
        "mad",
        "mellow",
        "mighty",
        "mild",
        "modern",
        "narrow",
        "neat",
        "new",
        "nice",
        "noble",
        "noisy",
        "odd",
        "old",
        "pale",
        "perfect",
        "pink",
        "plain",
        "polite",
        "poor",
        "proud",
        "purple",
        "quick",
        "quiet",
        "rapid",
        "rare",
        "raw",
        "red",
        "rich",
        "rough",
        "round",
        "royal",
        "rusty",
        "sad",
        "safe",
        "salty",
        "sharp",
        "shiny",
        "short",
        "shy",
        "silent",
        "silly",
        "simple",
        "slim",
        "slow",
        "small",
        "smooth",
        "soft",
        "solid",
        "sour",
        "spare",
        "square",
        "steady",
        "steep",
        "sticky",
        "stiff",
        "strange",
        "strict",
        "strong",
        "sunny",
        "super",
        "sweet",
        "swift",
        "tall",
        "tame",
        "thick",
        "thin",
        "tidy",
        "tiny",
        "tough",
        "true",
        "ugly",
        "vast",
        "violet",
        "warm",
        "weak",
        "wet",
        "white",
        "wide",
        "wild",
        "wise",
        "witty",
        "wooden",
        "yellow",
        "young",
        "zany",
    ]
)
NOUNS: tuple[str, ...] = tuple(
    [
        "acorn",
        "actor",
        "airport",
        "album",
        "anchor",
        "angle",
        "ankle",
        "apple",
        "apron",
        "arch",
        "arrow",
        "artist",
        "atlas",
        "attic",
        "avenue",
        "badge",
        "bagel",
        "bakery",
        "balloon",
        "bamboo",
        "banana",
        "banjo",
        "barn",
        "barrel",
        "basket",
        "beach",
        "beacon",
        "beard",
        "bell",
        "bench",
        "berry",
        "bicycle",
        "blanket",
        "blossom",
        "boat",
        "bonnet",
        "bottle",
        "boulder",
        "bracelet",
        "branch",
        "bread",
        "brick",
        "bridge",
        "broom",
        "bucket",
        "buffalo",
        "bugle",
        "butter",
        "button",
        "cabin",
        "cable",
        "cactus",
        "camera",
        "camel",
        "candle",
        "canoe",
        "canyon",
        "carpet",
        "carrot",
        "castle",
        "cellar",
        "chair",
        "chapel",
        "cherry",
        "chimney",
        "circus",
        "cliff",
        "clock",
        "cloud",
        "coast",
        "cobweb",
        "coffee",
        "comet",
        "compass",
        "copper",
        "cottage",
        "cotton",
        "crayon",
        "cricket",
        "crown",
        "crystal",
        "cup",
        "curtain",
        "cushion",
        "daisy",
        "desert",
        "diamond",
        "dolphin",
        "donkey",
        "dragon",
        "drum",
        "eagle",
        "earth",
        "engine",
        "falcon",
        "feather",
        "fence",
        "ferry",
        "fiddle",
        "finger",
        "flag",
        "flute",
        "forest",
        "fossil",
        "fountain",
        "fox",
        "garden",
        "garlic",
        "gate",
        "giraffe",
        "glacier",
        "glove",
        "goat",
        "granite",
        "grape",
        "guitar",
        "hammer",
        "harbor",
        "harp",
        "hat",
        "hawk",
        "helmet",
        "hill",
        "honey",
        "horse",
        "island",
        "ivory",
        "jacket",
        "jaguar",
        "jar",
        "jelly",
        "jungle",
        "kettle",
        "kitten",
        "ladder",
        "lagoon",
        "lamp",
        "lantern",
        "lemon",
        "lettuce",
        "library",
        "lily",
        "lion",
        "lizard",
        "lobster",
        "locket",
        "magnet",
        "mango",
        "maple",
        "marble",
        "meadow",
        "melon",
        "mirror",
        "mitten",
        "monkey",
        "moon",
        "mountain",
        "mushroom",
        "needle",
        "nest",
        "novel",
        "oak",
        "ocean",
        "olive",
        "onion",
        "orchard",
        "otter",
        "owl",
        "paddle",
        "palace",
        "panda",
        "paper",
        "parrot",
        "peach",
        "peanut",
        "pearl",
        "pebble",
        "pencil",
        "pepper",
        "piano",
        "pigeon",
        "pillow",
        "pine",
        "planet",
        "plum",
        "pocket",
        "pond",
        "potato",
        "pumpkin",
        "puzzle",
        "quilt",
        "rabbit",
        "radio",
        "rainbow",
        "raven",
        "ribbon",
        "river",
        "robin",
        "rocket",
        "saddle",
        "sailor",
        "salmon",
        "sand",
        "scarf",
        "shell",
        "shovel",
        "silver",
        "sparrow",
        "spider",
        "spoon",
        "squirrel",
        "stable",
        "statue",
        "stone",
        "storm",
        "sugar",
        "summit",
        "sweater",
        "table",
        "teapot",
        "temple",
        "thunder",
        "tiger",
        "tomato",
        "tower",
        "tractor",
        "trumpet",
        "tulip",
        "tunnel",
        "turtle",
        "umbrella",
        "valley",
        "violin",
        "wagon",
        "walnut",
        "whale",
        "wheat",
        "whistle",
        "willow",
        "window",
        "wizard",
        "wolf",
        "zebra",
    ]
)
VERBS: tuple[str, ...] = tuple(
    [
        "accept",
        "admire",
        "allow",
        "answer",
        "arrive",
        "attack",
        "bake",
        "balance",
        "bathe",
        "beg",
        "behave",
        "belong",
        "bless",
        "blink",
        "boast",
        "boil",
        "borrow",
        "bounce",
        "breathe",
        "bury",
        "calculate",
        "carry",
        "carve",
        "cause",
        "chase",
        "cheer",
        "chew",
        "clap",
        "climb",
        "collect",
        "comb",
        "compare",
        "complain",
        "count",
        "crawl",
        "cross",
        "cycle",
        "dance",
        "decide",
        "deliver",
        "describe",
        "dig",
        "divide",
        "drag",
        "dream",
        "drift",
        "drop",
        "earn",
        "embrace",
        "enjoy",
        "escape",
        "explain",
        "explore",
        "fasten",
        "fetch",
        "fold",
        "follow",
        "gather",
        "glow",
        "grab",
        "greet",
        "guard",
        "guess",
        "hang",
        "harvest",
        "hover",
        "hunt",
        "hurry",
        "imagine",
        "invent",
        "iron",
        "juggle",
        "jump",
        "kneel",
        "knit",
        "knock",
        "laugh",
        "launch",
        "lift",
        "listen",
        "march",
        "measure",
        "melt",
        "mend",
        "nod",
        "obey",
        "offer",
        "open",
        "paint",
        "pause",
        "peel",
        "plant",
        "play",
        "pluck",
        "polish",
        "pour",
        "pray",
        "promise",
        "pull",
        "punch",
        "push",
        "question",
        "race",
        "reach",
        "read",
        "relax",
        "remember",
        "repair",
        "reply",
        "rescue",
        "rinse",
        "roll",
        "rub",
        "sail",
        "scatter",
        "scrub",
        "search",
        "shiver",
        "sing",
        "skip",
        "sleep",
        "slide",
        "smile",
        "sneeze",
        "sniff",
        "spell",
        "spill",
        "spin",
        "sprout",
        "squeeze",
        "stare",
        "steer",
        "stir",
        "stitch",
        "stretch",
        "study",
        "swim",
        "swing",
        "tickle",
        "travel",
        "trust",
        "tumble",
        "twist",
        "unlock",
        "vanish",
        "wander",
        "wash",
        "watch",
        "whisper",
        "wiggle",
        "wink",
        "wobble",
        "wonder",
        "wrap",
        "write",
        "yawn",
        "yell",
        "zoom",
    ]
)
WORDS: tuple[str, ...] = tuple(sorted(set(ADJECTIVES) | set(NOUNS) | set(VERBS)))


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


@functools.lru_cache(maxsize=1)
def _essay_words() -> tuple[str, ...]:
    from ..data.sources import load_shakespeare  # raises DataUnavailable when the package is missing

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
