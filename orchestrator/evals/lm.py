"""Language-model primitives for the evaluations: log-likelihood of continuations and greedy
generation, batched, on any `model(input_ids_BT) -> logits_BTV`.

Conventions (the project's): every sequence starts with BOS; a sequence longer than the budget is
cut from the LEFT and the BOS token is kept at position 0 (`left_cut`). lm-evaluation-harness
(`HFLM._loglikelihood_tokens`) cuts from the left too but drops BOS with the rest; keeping it
matters here because the attention sink forms on BOS.

Batching follows the harness's backends (`batching`): requests sorted by length, longest first,
batched up to a token budget (`batch_size x max_len` tokens unless `batch_tokens` says otherwise),
results in request order; an out-of-memory error halves the batch and retries it.

`score_requests`: right padding (causal attention: tokens after a position never change its
logits), and requests whose model input is identical share one row. The model input of a request
(context c, continuation x_1..x_k) is c + x_1..x_{k-1}; requests that differ only in their last
continuation token (MMLU's " A" .. " D": one token each with BPE, " " + letter with the byte
tokenizer) therefore cost one row together. On a `GatedTransformer` the LM head runs only at the
scored positions (the head is most of a small model's FLOPs with a 50k vocabulary).

`greedy_generate`: on a `GatedTransformer`, KV-cached (`gatedmodels.generation`: the prompts
left-padded and run once, then one token per row and step). Any other callable runs the reference
loop without a cache, which re-runs the model on the whole growing batch for every new token
(`kv_cache=False` forces it: tests and the benchmark's "before" figure).

Shape legend: B batch rows, T time (padded width), V vocabulary, N gathered (row, position) pairs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from gatedmodels.generation import generate_greedy
from gatedmodels.model import GatedTransformer

from .batching import Budget, run_batches

Model = Callable[[torch.Tensor], torch.Tensor]
"""`model(input_ids_BT: LongTensor) -> logits_BTV` (an `nn.Module` or any callable)."""


def model_device(model: Model) -> torch.device:
    """The device of the model's parameters; CPU for a callable without parameters."""
    try:
        return next(model.parameters()).device  # type: ignore[attr-defined]
    except (AttributeError, StopIteration):
        return torch.device("cpu")


@contextmanager
def eval_mode(model: Model) -> Iterator[None]:
    """`model.eval()` and `torch.no_grad()` for the block; the previous train/eval mode is restored."""
    was_training = bool(getattr(model, "training", False))
    if hasattr(model, "eval"):
        model.eval()  # type: ignore[attr-defined]
    try:
        with torch.no_grad():
            yield
    finally:
        if was_training and hasattr(model, "train"):
            model.train(True)  # type: ignore[attr-defined]


def forward_logits(model: Model, input_ids_BT: torch.Tensor) -> torch.Tensor:
    """`model(input_ids_BT)` as a logits tensor (also accepts outputs with a `.logits` field)."""
    out = model(input_ids_BT)
    return getattr(out, "logits", out)


def left_cut(ids: Sequence[int], max_len: int) -> tuple[list[int], bool]:
    """`ids` cut from the left to at most `max_len` tokens, keeping `ids[0]` (the BOS token) at
    position 0: BOS + the last `max_len - 1` tokens. Returns the ids and whether anything was cut."""
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1 (room for BOS), got {max_len}")
    if len(ids) <= max_len:
        return list(ids), False
    return [ids[0], *ids[len(ids) - (max_len - 1) :]], True


def logits_at(model: Model, ids_BT: torch.Tensor, row_N: torch.Tensor, pos_N: torch.Tensor) -> torch.Tensor:
    """The logits (N, V) at the (row, position) pairs of a batch: on a `GatedTransformer` the LM
    head runs at those positions only; any other model's full logits are indexed."""
    if isinstance(model, GatedTransformer):
        x_BTD = model.hidden(ids_BT)
        return model.head(x_BTD[row_N.to(x_BTD.device), pos_N.to(x_BTD.device)])
    logits_BTV = forward_logits(model, ids_BT)
    # gather the needed rows before any dtype change: never materialise (B, T, V) twice
    return logits_BTV[row_N.to(logits_BTV.device), pos_N.to(logits_BTV.device)]


def _budget(batch_size: int, max_len: int, batch_tokens: int | None) -> Budget:
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if batch_tokens is not None and batch_tokens < 1:
        raise ValueError(f"batch_tokens must be >= 1, got {batch_tokens}")
    return Budget(batch_tokens or batch_size * max_len)


def score_continuations(
    model: Model,
    requests: Sequence[tuple[Sequence[int], Sequence[int]]],
    *,
    max_len: int,
    batch_size: int,
    pad_id: int = 0,
    batch_tokens: int | None = None,
) -> tuple[list[float], int]:
    """Summed log-probability of each continuation given its context (see `score_requests`);
    returns the log-probabilities and the number of requests whose context was cut."""
    scores, _, n_cut = score_requests(model, requests, max_len=max_len, batch_size=batch_size, pad_id=pad_id, batch_tokens=batch_tokens)
    return scores, n_cut


def score_requests(
    model: Model,
    requests: Sequence[tuple[Sequence[int], Sequence[int]]],
    *,
    max_len: int,
    batch_size: int,
    pad_id: int = 0,
    batch_tokens: int | None = None,
) -> tuple[list[float], list[bool], int]:
    """Summed log-probability of each continuation given its context, and whether every
    continuation token is the model's greedy (argmax) choice (the harness's `is_greedy`).

    `requests`: (context_ids, continuation_ids) pairs of token ids; each context starts with BOS.
    A request whose context + continuation exceeds `max_len` has its context cut from the left,
    keeping BOS (`left_cut`). Returns the log-probabilities (natural log) and the greedy flags in
    request order, and the number of requests whose context was cut. A forward pass holds at most
    `batch_tokens` (default `batch_size x max_len`) tokens of rows x padded width (`batching`).
    """
    budget = _budget(batch_size, max_len, batch_tokens)
    n_cut = 0
    rows: dict[tuple[int, ...], list[int]] = {}  # model input -> indices of the requests it serves
    first_pos: list[int] = []  # position whose logits predict the request's first continuation token
    for i, (context, continuation) in enumerate(requests):
        if len(context) == 0:
            raise ValueError(f"request {i}: empty context; every context starts with the BOS id")
        if len(continuation) == 0:
            raise ValueError(f"request {i}: empty continuation")
        if len(continuation) >= max_len:
            raise ValueError(f"request {i}: a continuation of {len(continuation)} tokens leaves no room for BOS within max_len {max_len}")
        context, was_cut = left_cut([int(t) for t in context], max_len - len(continuation))
        n_cut += was_cut
        rows.setdefault(tuple(context + [int(t) for t in continuation[:-1]]), []).append(i)
        first_pos.append(len(context) - 1)

    scores = [0.0] * len(requests)
    greedy = [False] * len(requests)
    device = model_device(model)

    def run(batch: list[tuple[int, ...]]) -> None:
        ids_BT = torch.full((len(batch), len(batch[0])), pad_id, dtype=torch.long)
        row_N: list[int] = []
        pos_N: list[int] = []
        target_N: list[int] = []
        owner_N: list[int] = []  # index into `served`
        served: list[int] = []
        for b, row in enumerate(batch):
            ids_BT[b, : len(row)] = torch.tensor(row, dtype=torch.long)
            for i in rows[row]:
                for j, token in enumerate(requests[i][1]):
                    row_N.append(b)
                    pos_N.append(first_pos[i] + j)
                    target_N.append(int(token))
                    owner_N.append(len(served))
                served.append(i)
        logp_NV = logits_at(model, ids_BT.to(device), torch.tensor(row_N), torch.tensor(pos_N)).float().log_softmax(dim=-1)
        targets = torch.tensor(target_N, device=logp_NV.device)
        owners = torch.tensor(owner_N, device=logp_NV.device)
        token_logp_N = logp_NV.gather(1, targets[:, None])[:, 0]
        sums = torch.zeros(len(served), dtype=torch.float64, device=logp_NV.device)
        sums.index_add_(0, owners, token_logp_N.double())
        misses = torch.zeros(len(served), dtype=torch.long, device=logp_NV.device)
        misses.index_add_(0, owners, (logp_NV.argmax(dim=-1) != targets).long())
        for k, i in enumerate(served):  # published only once the batch has run
            scores[i] = float(sums[k])
            greedy[i] = int(misses[k]) == 0

    with eval_mode(model):
        run_batches(sorted(rows, key=len, reverse=True), len, budget, run)
    return scores, greedy, n_cut


def greedy_generate(model: Model, prompts_ids: Sequence[Sequence[int]], **options: Any) -> list[list[int]]:
    """`generate_requests` (its keyword options, its checks) without the count of prompts cut."""
    return generate_requests(model, prompts_ids, **options)[0]


def generate_requests(
    model: Model,
    prompts_ids: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    max_len: int,
    stop_ids: Sequence[int] = (),
    stop_when: Callable[[list[int]], bool] | None = None,
    batch_size: int,
    pad_id: int = 0,
    batch_tokens: int | None = None,
    kv_cache: bool = True,
) -> tuple[list[list[int]], int]:
    """Greedy continuation of each prompt (token ids starting with BOS), and the number of prompts cut.

    Prompts longer than `max_len - max_new_tokens` are cut from the left keeping BOS, so prompt
    plus generation never exceeds `max_len`. A row stops at the first token in `stop_ids` (which
    is not returned), when `stop_when(new_tokens)` says so (e.g. a stop string appeared; the
    tokens are returned), or after `max_new_tokens`. Returns only the new tokens, in prompt order.
    A `GatedTransformer` generates with its KV cache (its attention kind must have a cache path:
    `kv_cache.NoCachePath` otherwise); other callables, or `kv_cache=False`, without one.
    """
    budget = _budget(batch_size, max_len, batch_tokens)
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    if max_new_tokens >= max_len:
        raise ValueError(f"max_new_tokens ({max_new_tokens}) leaves no room for a prompt within max_len {max_len}")
    outputs: list[list[int]] = [[] for _ in prompts_ids]
    if max_new_tokens == 0 or not prompts_ids:
        return outputs, 0
    prompts: list[list[int]] = []
    n_cut = 0
    for i, prompt in enumerate(prompts_ids):
        if len(prompt) == 0:
            raise ValueError(f"prompt {i}: empty; every prompt starts with the BOS id")
        cut, was_cut = left_cut([int(t) for t in prompt], max_len - max_new_tokens)
        prompts.append(cut)
        n_cut += was_cut
    cached = kv_cache and isinstance(model, GatedTransformer)

    def run(batch: list[int]) -> None:
        group = [prompts[i] for i in batch]
        if cached:
            gens = generate_greedy(model, group, max_new_tokens=max_new_tokens, stop_ids=stop_ids, stop_when=stop_when, pad_id=pad_id)  # type: ignore[arg-type]
        else:
            gens = _generate_uncached(model, group, max_new_tokens=max_new_tokens, stop_ids=stop_ids, stop_when=stop_when, pad_id=pad_id)
        for i, gen in zip(batch, gens):  # published only once the batch has run
            outputs[i] = gen

    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]), reverse=True)
    with eval_mode(model):
        run_batches(order, lambda i: len(prompts[i]) + max_new_tokens, budget, run)
    return outputs, n_cut


def _generate_uncached(
    model: Model,
    prompts: list[list[int]],
    *,
    max_new_tokens: int,
    stop_ids: Sequence[int],
    stop_when: Callable[[list[int]], bool] | None,
    pad_id: int,
) -> list[list[int]]:
    """The reference loop: one batch, right-padded, the model re-run on the whole growing batch for
    every new token; every row reads the logits at its own last position."""
    outputs: list[list[int]] = [[] for _ in prompts]
    stops = torch.tensor(sorted({int(s) for s in stop_ids}), dtype=torch.long)
    device = model_device(model)
    B = len(prompts)
    lens_B = torch.tensor([len(p) for p in prompts], dtype=torch.long)
    ids_BT = torch.full((B, int(lens_B.max()) + max_new_tokens), pad_id, dtype=torch.long)
    for b, prompt in enumerate(prompts):
        ids_BT[b, : len(prompt)] = torch.tensor(prompt, dtype=torch.long)
    done_B = torch.zeros(B, dtype=torch.bool)
    rows_B = torch.arange(B)
    for step in range(max_new_tokens):
        cur_B = lens_B + step  # every row grows by one token per step; finished rows get padding
        width = int(cur_B.max())
        logits_BTV = forward_logits(model, ids_BT[:, :width].to(device))
        last_BV = logits_BTV[rows_B.to(logits_BTV.device), (cur_B - 1).to(logits_BTV.device)]
        next_B = last_BV.float().argmax(dim=-1).cpu()
        stopped_B = torch.isin(next_B, stops) if len(stops) else torch.zeros(B, dtype=torch.bool)
        for b in torch.nonzero(~done_B & ~stopped_B).flatten().tolist():
            outputs[b].append(int(next_B[b]))
            if stop_when is not None and stop_when(outputs[b]):
                stopped_B[b] = True  # this token is kept; the row generates no more
        done_B |= stopped_B
        ids_BT[rows_B, cur_B] = torch.where(done_B, torch.full_like(next_B, pad_id), next_B)
        if bool(done_B.all()):
            break
    return outputs
