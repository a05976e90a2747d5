"""Language-model primitives for the evaluations: log-likelihood of continuations and greedy
generation, batched, on any `model(input_ids_BT) -> logits_BTV`.

Conventions (the project's): every sequence starts with BOS; a sequence longer than the budget is
cut from the LEFT and the BOS token is kept at position 0 (`left_cut`). lm-evaluation-harness
(`HFLM._loglikelihood_tokens`) cuts from the left too but drops BOS with the rest; keeping it
matters here because the attention sink forms on BOS.

`score_continuations` follows the harness's batching: requests sorted by length (longest first,
so padding is small and an out-of-memory error shows at the first batch), right padding (causal
attention: tokens after a position never change its logits), and requests whose model input is
identical share one row. The model input of a request (context c, continuation x_1..x_k) is
c + x_1..x_{k-1}; requests that differ only in their last continuation token (MMLU's " A" .. " D":
one token each with BPE, " " + letter with the byte tokenizer) therefore cost one row together.

`greedy_generate` has no KV cache: it re-runs the model on the growing batch, which is simple and
exact and fine at CPU evaluation sizes; every row reads the logits at its own last position.

Shape legend: B batch rows, T time (padded width), V vocabulary, N gathered (row, position) pairs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch

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


def _batches(items: list, size: int) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def score_continuations(
    model: Model,
    requests: Sequence[tuple[Sequence[int], Sequence[int]]],
    *,
    max_len: int,
    batch_size: int,
    pad_id: int = 0,
) -> tuple[list[float], int]:
    """Summed log-probability of each continuation given its context (see `score_requests`);
    returns the log-probabilities and the number of requests whose context was cut."""
    scores, _, n_cut = score_requests(model, requests, max_len=max_len, batch_size=batch_size, pad_id=pad_id)
    return scores, n_cut


def score_requests(
    model: Model,
    requests: Sequence[tuple[Sequence[int], Sequence[int]]],
    *,
    max_len: int,
    batch_size: int,
    pad_id: int = 0,
) -> tuple[list[float], list[bool], int]:
    """Summed log-probability of each continuation given its context, and whether every
    continuation token is the model's greedy (argmax) choice (the harness's `is_greedy`).

    `requests`: (context_ids, continuation_ids) pairs of token ids; each context starts with BOS.
    A request whose context + continuation exceeds `max_len` has its context cut from the left,
    keeping BOS (`left_cut`). Returns the log-probabilities (natural log) and the greedy flags in
    request order, and the number of requests whose context was cut. The model sees at most `batch_size` rows of at
    most `max_len - 1` tokens at once; its logits (B, T, V) are the memory peak.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
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
    order = sorted(rows, key=len, reverse=True)
    with eval_mode(model):
        for batch in _batches(order, batch_size):
            T = len(batch[0])
            ids_BT = torch.full((len(batch), T), pad_id, dtype=torch.long)
            row_N: list[int] = []
            pos_N: list[int] = []
            target_N: list[int] = []
            owner_N: list[int] = []  # index into `served`
            served: list[int] = []
            for b, row in enumerate(batch):
                ids_BT[b, : len(row)] = torch.tensor(row, dtype=torch.long)
                for i in rows[row]:
                    continuation = requests[i][1]
                    for j, token in enumerate(continuation):
                        row_N.append(b)
                        pos_N.append(first_pos[i] + j)
                        target_N.append(int(token))
                        owner_N.append(len(served))
                    served.append(i)
            logits_BTV = forward_logits(model, ids_BT.to(device))
            # gather the needed rows before any dtype change: never materialise (B, T, V) twice
            picked_NV = logits_BTV[torch.tensor(row_N, device=logits_BTV.device), torch.tensor(pos_N, device=logits_BTV.device)]
            logp_NV = picked_NV.float().log_softmax(dim=-1)
            targets = torch.tensor(target_N, device=logp_NV.device)
            owners = torch.tensor(owner_N, device=logp_NV.device)
            token_logp_N = logp_NV.gather(1, targets[:, None])[:, 0]
            sums = torch.zeros(len(served), dtype=torch.float64, device=logp_NV.device)
            sums.index_add_(0, owners, token_logp_N.double())
            misses = torch.zeros(len(served), dtype=torch.long, device=logp_NV.device)
            misses.index_add_(0, owners, (logp_NV.argmax(dim=-1) != targets).long())
            for k, i in enumerate(served):
                scores[i] = float(sums[k])
                greedy[i] = int(misses[k]) == 0
    return scores, greedy, n_cut


def greedy_generate(
    model: Model,
    prompts_ids: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    max_len: int,
    stop_ids: Sequence[int] = (),
    stop_when: Callable[[list[int]], bool] | None = None,
    batch_size: int,
    pad_id: int = 0,
) -> list[list[int]]:
    """Greedy continuation of each prompt (token ids starting with BOS), without a KV cache.

    Prompts longer than `max_len - max_new_tokens` are cut from the left keeping BOS, so prompt
    plus generation never exceeds `max_len`. A row stops at the first token in `stop_ids` (which
    is not returned), when `stop_when(new_tokens)` says so (e.g. a stop string appeared; the
    tokens are returned), or after `max_new_tokens`. Returns only the new tokens, in prompt order.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    if max_new_tokens >= max_len:
        raise ValueError(f"max_new_tokens ({max_new_tokens}) leaves no room for a prompt within max_len {max_len}")
    outputs: list[list[int]] = [[] for _ in prompts_ids]
    if max_new_tokens == 0 or not prompts_ids:
        return outputs
    prompts: list[list[int]] = []
    for i, prompt in enumerate(prompts_ids):
        if len(prompt) == 0:
            raise ValueError(f"prompt {i}: empty; every prompt starts with the BOS id")
        prompts.append(left_cut([int(t) for t in prompt], max_len - max_new_tokens)[0])
    stops = torch.tensor(sorted({int(s) for s in stop_ids}), dtype=torch.long)
    device = model_device(model)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]), reverse=True)
    with eval_mode(model):
        for batch in _batches(order, batch_size):
            B = len(batch)
            lens_B = torch.tensor([len(prompts[i]) for i in batch], dtype=torch.long)
            ids_BT = torch.full((B, int(lens_B.max()) + max_new_tokens), pad_id, dtype=torch.long)
            for b, i in enumerate(batch):
                ids_BT[b, : len(prompts[i])] = torch.tensor(prompts[i], dtype=torch.long)
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
                    outputs[batch[b]].append(int(next_B[b]))
                    if stop_when is not None and stop_when(outputs[batch[b]]):
                        stopped_B[b] = True  # this token is kept; the row generates no more
                done_B |= stopped_B
                ids_BT[rows_B, cur_B] = torch.where(done_B, torch.full_like(next_B, pad_id), next_B)
                if bool(done_B.all()):
                    break
    return outputs
