"""The reference MMLU's prompts: the harness's template (`description`, `format_question`, the `first_n` few-shot
prefix, `build_prompt`) and the tokenisation of each prompt's four answer requests as the
harness's `TemplateLM._encode_pair` splits them (`encode_requests`); the derivation of both, file
by file, is in the docstring of this package."""

from __future__ import annotations

from orchestrator.data.tokenizers import Tokenizer

from .data import LETTERS, Question

NUM_FEWSHOT = 5
TARGET_DELIMITER = " "
FEWSHOT_DELIMITER = "\n\n"


def description(subject: str) -> str:
    """The harness's task description for `subject` (`_generate_configs.py`)."""
    return f"The following are multiple choice questions (with answers) about {' '.join(subject.split('_'))}.\n\n"


def format_question(q: Question) -> str:
    """The harness's `doc_to_text` (`_default_template_yaml`)."""
    c = q.choices
    return f"{q.question.strip()}\nA. {c[0]}\nB. {c[1]}\nC. {c[2]}\nD. {c[3]}\nAnswer:"


def fewshot_prefix(subject: str, dev: tuple[Question, ...] | list[Question], num_fewshot: int = NUM_FEWSHOT) -> str:
    """Description + the first `num_fewshot` dev examples with their answers (sampler `first_n`)."""
    if num_fewshot > len(dev):
        raise ValueError(f"{subject}: {num_fewshot}-shot needs {num_fewshot} dev examples, the data has {len(dev)}")
    shots = "".join(format_question(d) + TARGET_DELIMITER + LETTERS[d.answer] + FEWSHOT_DELIMITER for d in dev[:num_fewshot])
    return description(subject) + shots


def build_prompt(q: Question, dev: tuple[Question, ...] | list[Question], num_fewshot: int = NUM_FEWSHOT) -> str:
    """The full context string for `q` (the harness's `fewshot_context`)."""
    return fewshot_prefix(q.subject, dev, num_fewshot) + format_question(q)


def continuations() -> list[str]:
    """The four continuation strings, " A" .. " D" (target_delimiter + choice)."""
    return [TARGET_DELIMITER + letter for letter in LETTERS]


def encode_requests(tokenizer: Tokenizer, prompts: list[str]) -> list[tuple[list[int], list[list[int]]]]:
    """(BOS + context ids, [continuation ids for " A" .. " D"]) per prompt, split as the harness's
    `TemplateLM._encode_pair` does: continuation = encode(context + cont)[len(encode(context)):]."""
    if not prompts:
        return []
    contexts = [ids.tolist() for ids in tokenizer.encode(prompts)]
    alone = [ids.tolist() for ids in tokenizer.encode(continuations())]
    # fast path when the split property holds on the first prompt (it does for byte-level BPEs)
    wholes = [ids.tolist() for ids in tokenizer.encode([prompts[0] + c for c in continuations()])]
    fast = all(w[: len(contexts[0])] == contexts[0] and w[len(contexts[0]) :] == a for w, a in zip(wholes, alone))
    out = []
    for prompt, ctx in zip(prompts, contexts):
        if fast:
            conts = alone
        else:
            conts = [w.tolist()[len(ctx) :] for w in tokenizer.encode([prompt + c for c in continuations()])]
            if any(not c for c in conts):
                raise ValueError(f"tokenizer {tokenizer.name}: an answer continuation encodes to no tokens after its context")
        out.append(([tokenizer.bos_id, *ctx], conts))
    return out
