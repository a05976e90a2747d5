"""Length-sorted batches up to a token budget, and a budget that halves on out-of-memory errors.

What lm-evaluation-harness's own backends do (`HFLM`: requests sorted longest first, batched,
results put back in request order; `batch_size: auto` halves on an out-of-memory error), with the
batch measured in tokens: a batch holds as many requests as fit `rows x padded width <= budget`
tokens, the padded width being its first (longest) request's. Sorted longest first, the widest
batch comes first, so an out-of-memory error shows at once; short requests then share a batch in
larger numbers. The default budget is `batch_size x max_len` tokens: never more memory than
`batch_size` rows at the longest input, which is what the `batch_size` setting always promised.

An out-of-memory error (CUDA's, or a CPU allocator's) halves the rows of the failing batch and
retries it; the smaller budget holds for the rest of the requests. A batch of one row that does
not fit is an error: nothing smaller can run.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable, Sequence
from typing import TypeVar

import torch

log = logging.getLogger(__name__)
T = TypeVar("T")

OOM_MESSAGES = ("out of memory", "can't allocate memory", "CUDNN_STATUS_NOT_SUPPORTED")
"""Texts of the out-of-memory errors that are not `torch.OutOfMemoryError` (CPU allocator, cuDNN),
as accelerate's `find_executable_batch_size` (HFLM's auto batch) recognises them."""


def is_oom(err: BaseException) -> bool:
    """Whether `err` says the device ran out of memory."""
    if isinstance(err, torch.OutOfMemoryError):
        return True
    return isinstance(err, RuntimeError) and len(err.args) == 1 and any(m in str(err.args[0]) for m in OOM_MESSAGES)


def free_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class Budget:
    """Tokens (rows x padded width) per forward pass; `halvings` counts the out-of-memory retries."""

    def __init__(self, tokens: int):
        if tokens < 1:
            raise ValueError(f"a batch budget of {tokens} tokens; allowed: >= 1")
        self.tokens = tokens
        self.halvings = 0

    def rows(self, width: int) -> int:
        """Rows of `width` tokens that fit (at least one)."""
        return max(1, self.tokens // max(1, width))


def run_batches(items: Sequence[T], width: Callable[[T], int], budget: Budget, run: Callable[[list[T]], None]) -> None:
    """`run(batch)` on consecutive batches of `items` (sorted longest first by the caller), each as
    many items as `budget` allows at its first item's `width`. `run` must publish its results only
    when it returns: a batch that runs out of memory is run again, with half the rows."""
    i = 0
    while i < len(items):
        w = width(items[i])
        batch = list(items[i : i + budget.rows(w)])
        try:
            run(batch)
            i += len(batch)
            continue
        except Exception as err:  # torch raises OutOfMemoryError, or a RuntimeError, by device
            if not is_oom(err) or len(batch) == 1:
                raise
        free_memory()  # outside the except block: its traceback no longer holds the batch's tensors
        budget.tokens = (len(batch) // 2) * w
        budget.halvings += 1
        log.warning(
            "out of memory with %d rows of %d tokens: retrying with %d (a budget of %d tokens)",
            len(batch),
            w,
            len(batch) // 2,
            budget.tokens,
        )
