"""Greedy generation with the KV cache: one batch of prompts, each row stopping on its own.

The prompts are left-padded to one width and run through the model once (the prefill), which
fills every layer's cache (`gatedmodels.kv_cache`); each following step feeds one token per row
and reads the logits of that token only. A row stops at a token in `stop_ids` (not returned), when
`stop_when(its new tokens)` says so (the token is kept: a stop string has appeared), or after
`max_new_tokens`. A finished row leaves the batch (its cache rows are dropped), so the remaining
rows do not pay for it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from .model import GatedTransformer


@torch.no_grad()
def generate_greedy(
    model: GatedTransformer,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    stop_ids: Sequence[int] = (),
    stop_when: Callable[[list[int]], bool] | None = None,
    pad_id: int = 0,
) -> list[list[int]]:
    """The greedy continuation of each prompt (token ids), at most `max_new_tokens` each, in
    prompt order. The caller cuts prompts to the model's context; the cache holds the longest
    prompt plus `max_new_tokens`. Raises `kv_cache.NoCachePath` for an attention kind without one."""
    outputs: list[list[int]] = [[] for _ in prompts]
    if max_new_tokens < 1 or not prompts:
        return outputs
    if any(len(p) == 0 for p in prompts):
        raise ValueError("empty prompt: every prompt has at least its BOS token")
    device = model.embed.weight.device
    width = max(len(p) for p in prompts)
    ids_BT = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask_BT = torch.zeros(len(prompts), width, dtype=torch.bool)
    for b, prompt in enumerate(prompts):
        ids_BT[b, width - len(prompt) :] = torch.tensor(list(prompt), dtype=torch.long)
        mask_BT[b, width - len(prompt) :] = True
    cache = model.new_cache(len(prompts), width + max_new_tokens)
    x_BTD = model.hidden(ids_BT.to(device), cache=cache, mask_BT=mask_BT.to(device))
    logits_BV = model.head(x_BTD[:, -1])
    rows = list(range(len(prompts)))  # batch row -> prompt index
    stops = {int(s) for s in stop_ids}
    for step in range(max_new_tokens):
        next_B = logits_BV.float().argmax(dim=-1)
        keep: list[int] = []
        for b, token in enumerate(next_B.tolist()):
            out = outputs[rows[b]]
            if token in stops:
                continue
            out.append(token)
            if stop_when is None or not stop_when(out):
                keep.append(b)
        if not keep or step == max_new_tokens - 1:
            break
        if len(keep) < len(rows):
            kept = torch.tensor(keep, device=next_B.device)
            cache.select(kept)
            next_B = next_B[kept]
            rows = [rows[b] for b in keep]
        logits_BV = model.head(model.hidden(next_B[:, None], cache=cache)[:, -1])
    return outputs
