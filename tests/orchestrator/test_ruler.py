"""RULER-style suite: determinism per seed, every task's answers really are in its prompt where
they should be, prompts fill but never exceed the requested token length (byte and GPT-2
tokenizers), RULER's string_match_all, an oracle that scores 100, and a tiny model end to end.
Also greedy generation in `evals.lm` (batched = one at a time, stop ids, left cut)."""

from __future__ import annotations

import re
from collections import Counter

import pytest
import torch
from torch import nn

from gatedmodels import GatedTransformer, ModelConfig
from orchestrator.data.tokenizers import byte_tokenizer, gpt2_tokenizer
from orchestrator.evals import ruler
from orchestrator.evals.lm import greedy_generate

# lengths that fit every task (ruler.min_length: byte cwe ~1,600, GPT-2 cwe ~470)
LENGTH = {"byte": 2048, "gpt2": 512}


@pytest.fixture(scope="module", params=["byte", "gpt2"])
def tok(request):
    return byte_tokenizer() if request.param == "byte" else gpt2_tokenizer()


def test_samples_are_deterministic_per_seed():
    tok = gpt2_tokenizer()
    for task in ruler.TASKS:
        a = ruler.make_samples(task, 512, tok, 2, seed=3)
        assert a == ruler.make_samples(task, 512, tok, 2, seed=3)
        assert [s.prompt for s in a] != [s.prompt for s in ruler.make_samples(task, 512, tok, 2, seed=4)]
        assert a[0].prompt != a[1].prompt
    # the same seed keeps the needles across lengths; only the haystack grows
    short, long = ruler.make_samples("niah_single", 256, tok, 1, 0)[0], ruler.make_samples("niah_single", 1024, tok, 1, 0)[0]
    assert short.references == long.references and short.depths == long.depths and short.prompt != long.prompt


def _check_niah(s: ruler.Sample) -> None:
    needles = re.findall(r"One of the special magic numbers for ([a-z]+-[a-z]+) is: (\d{7})\.", s.prompt)
    question = s.prompt[s.prompt.rindex("\nWhat ") :]
    asked = {k for k, _ in needles if k in question}
    n_needles, n_asked = {"niah_single": (1, 1), "niah_multikey": (4, 1), "niah_multivalue": (4, 1), "niah_multiquery": (4, 4)}[s.task]
    assert len(needles) == n_needles and len(asked) == n_asked
    assert sorted(s.references) == sorted(v for k, v in needles if k in asked)
    if s.haystack == "noise":  # each needle is its own line, at int(n_noise * depth / 100) among the noise lines
        lines = s.prompt.split("\n")[1:-1]
        n_noise = sum(line == ruler.NOISE for line in lines)
        needle_rows = [i for i, line in enumerate(lines) if line.startswith("One of the special")]
        assert needle_rows == [int(n_noise * d / 100) + j for j, d in enumerate(s.depths)]


def _resolve(text: str) -> tuple[dict[str, str], list[str]]:
    """Variable -> value for a vt context, checking each assignment comes after what it copies."""
    values: dict[str, str] = {}
    order: list[str] = []
    for name, source in re.findall(r"VAR ([A-Z]+) = (\d+|VAR [A-Z]+)", text):
        if source.startswith("VAR "):
            assert source[4:] in values, f"{name} copies {source[4:]} before it is assigned"
            values[name] = values[source[4:]]
        else:
            values[name] = source
        order.append(name)
    return values, order


def _check_vt(s: ruler.Sample) -> None:
    head = "Memorize and track the chain(s)"
    example, main = s.prompt[: s.prompt.rindex(head)], s.prompt[s.prompt.rindex(head) :]
    values, order = _resolve(main)
    value = re.search(r"assigned the value (\d+) in the text above", main).group(1)
    assert [v for v in order if values[v] == value] == s.references and len(s.references) == 5
    icl_values, _ = _resolve(example)  # the in-context example answers its own chain
    icl_answer = example.rsplit("they are:", 1)[1].split()
    icl_value = re.search(r"assigned the value (\d+) in the text above", example).group(1)
    assert icl_answer == [v for v in icl_values if icl_values[v] == icl_value]


def _check_cwe(s: ruler.Sample) -> None:
    head = "Memorize the ones that appear most often.\n"
    listing = s.prompt[s.prompt.rindex(head) + len(head) : s.prompt.rindex("\nQuestion:")]
    items = re.findall(r"(\d+)\. ([a-z]+)", listing)
    assert [int(i) for i, _ in items] == list(range(1, len(items) + 1))
    counts = Counter(w for _, w in items)
    assert len(s.references) == 10 and all(counts[w] == 6 for w in s.references)
    assert max(c for w, c in counts.items() if w not in s.references) < 6


def _check_fwe(s: ruler.Sample) -> None:
    text = s.prompt[s.prompt.index("coded words. ") + len("coded words. ") : s.prompt.rindex("\nQuestion:")]
    ranked = [c for c in Counter(text.split()).most_common() if c[0] != "..."]
    assert Counter(text.split()).most_common(1)[0][0] == "..."
    assert {w for w, _ in ranked[:3]} == set(s.references)
    assert len(ranked) == 3 or ranked[2][1] > ranked[3][1]


CHECKS = {**{t: _check_niah for t in ruler.NIAH_SHAPES}, "vt": _check_vt, "cwe": _check_cwe, "fwe": _check_fwe}


@pytest.mark.parametrize("task", ruler.TASKS)
def test_answers_are_in_the_prompt_and_prompts_fill_the_length(tok, task):
    length = LENGTH[tok.name]
    for s in ruler.make_samples(task, length, tok, 3, seed=0):
        CHECKS[task](s)
        n = len(tok.encode([s.prompt])[0]) + 1
        assert n == s.n_tokens <= length
        assert n > length - 100, "the haystack fills the length (one unit is < 100 tokens)"
        assert s.task == task and s.length == length


@pytest.mark.parametrize("task", ["niah_single", "niah_multikey", "vt"])
@pytest.mark.slow
def test_essay_haystack(task):
    tok = gpt2_tokenizer()
    for s in ruler.make_samples(task, 512, tok, 2, seed=1, haystack="essay"):
        CHECKS[task](s)
        assert ruler.NOISE not in s.prompt and s.n_tokens <= 512 and s.n_tokens > 400
        assert "by William Shakespeare" in s.prompt  # the essay starts with the first play's title page


def test_too_short_a_length_says_what_it_needs():
    tok = byte_tokenizer()
    need = ruler.min_length("niah_single", tok)
    with pytest.raises(ValueError, match=f"at least {need}") as err:
        ruler.make_samples("niah_single", 128, tok, 1, seed=0)
    assert "\n" not in str(err.value)
    assert ruler.make_samples("niah_single", need, tok, 1, seed=0)[0].n_tokens <= need
    with pytest.raises(ValueError):
        ruler.make_samples("niah_single", need - 1, tok, 1, seed=0)
    with pytest.raises(ValueError, match="allowed"):
        ruler.make_samples("qa", 512, tok, 1, seed=0)


def test_score_is_rulers_string_match_all():
    assert ruler.score("The numbers are 1234567 and 7654321.", ["1234567", "7654321"]) == 1.0
    assert ruler.score("1234567", ["1234567", "7654321"]) == 0.5
    assert ruler.score("nothing here", ["1234567"]) == 0.0
    assert ruler.score("ABCDE fghij", ["abcde", "FGHIJ"]) == 1.0  # case-insensitive
    assert ruler.score("xx12345678xx", ["2345678"]) == 1.0  # containment, as RULER
    assert ruler.postprocess("  4521\x00 \n") == "4521"
    with pytest.raises(ValueError):
        ruler.score("x", [])


class Oracle(nn.Module):
    """Knows every prompt's target: emits its tokens, then the stop id; logits are 0 elsewhere."""

    def __init__(self, vocab_size: int, pairs: list[tuple[list[int], list[int]]], stop_id: int):
        super().__init__()
        self.V = vocab_size
        self.pairs = [(torch.tensor(p), [*t, stop_id]) for p, t in pairs]
        self.anchor = nn.Parameter(torch.zeros(1))

    def forward(self, input_ids_BT: torch.Tensor) -> torch.Tensor:
        B, T = input_ids_BT.shape
        logits_BTV = torch.zeros(B, T, self.V)
        for b in range(B):
            for prompt, target in self.pairs:
                L = len(prompt)
                if T >= L and torch.equal(input_ids_BT[b, :L], prompt):
                    for g, token in enumerate(target):
                        if L - 1 + g < T:
                            logits_BTV[b, L - 1 + g, token] = 10.0
                    break
        return logits_BTV


def test_an_oracle_scores_100():
    tok = byte_tokenizer()
    length = LENGTH["byte"]
    pairs = []
    for task in ruler.TASKS:
        for s in ruler.make_samples(task, length, tok, 2, seed=5):
            pairs.append(([tok.bos_id, *tok.encode([s.prompt])[0].tolist()], tok.encode([s.target])[0].tolist()))
    result = ruler.run_ruler(Oracle(tok.vocab_size, pairs, tok.bos_id), tok, tasks=ruler.TASKS, lengths=[length], n=2, seed=5, batch_size=4)
    assert result.scores == {(t, length): 100.0 for t in ruler.TASKS}
    assert result.per_length == {length: 100.0} and result.average == 100.0
    assert set(result.metrics()) >= {f"ruler/niah_single/{length}", f"ruler/avg/{length}", "ruler/avg"}


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    return GatedTransformer(ModelConfig.preset("tiny", vocab_size=257))


def test_tiny_model_end_to_end(tiny):
    """RULER's prompts take >= 439 bytes (`min_length`), so the byte-level run starts at 512, not 128."""
    tok = byte_tokenizer()
    with pytest.raises(ValueError, match="at least"):
        ruler.run_ruler(tiny, tok, tasks=["niah_single"], lengths=[128], n=1, seed=0)
    result = ruler.run_ruler(tiny, tok, tasks=["niah_single", "fwe"], lengths=[512], n=2, seed=0, batch_size=2)
    assert set(result.scores) == {("niah_single", 512), ("fwe", 512)}
    assert all(0.0 <= v <= 100.0 for v in result.scores.values())
    assert 0.0 <= result.per_length[512] <= 100.0
    assert all(len(p) == 2 for p in result.predictions.values())


def test_greedy_generation_batched_equals_one_by_one(tiny):
    g = torch.Generator().manual_seed(2)
    prompts = [[256, *torch.randint(0, 256, (n,), generator=g).tolist()] for n in (3, 17, 9, 30)]
    batched = greedy_generate(tiny, prompts, max_new_tokens=6, max_len=64, batch_size=3)
    single = [greedy_generate(tiny, [p], max_new_tokens=6, max_len=64, batch_size=1)[0] for p in prompts]
    assert batched == single and all(len(o) == 6 for o in batched)
    # reference: plain argmax decoding on the full sequence
    with torch.no_grad():
        seq = list(prompts[1])
        for _ in range(6):
            seq.append(int(tiny(torch.tensor([seq]))[0, -1].argmax()))
    assert batched[1] == seq[len(prompts[1]) :]
    # a stop id ends a row without being returned; other rows continue
    first = batched[0][0]
    stopped = greedy_generate(tiny, prompts, max_new_tokens=6, max_len=64, stop_ids=[first], batch_size=4)
    assert stopped[0] == [] and all(first not in o for o in stopped)
    # prompts longer than max_len - max_new_tokens are cut from the left, keeping BOS
    cut = greedy_generate(tiny, [prompts[3]], max_new_tokens=4, max_len=12, batch_size=1)
    assert cut == greedy_generate(tiny, [[256, *prompts[3][-7:]]], max_new_tokens=4, max_len=64, batch_size=1)
