"""The held-out evaluation at longer contexts than training (`eval.length`): for each length, the
data source's own held-out sequences drawn at that length, scored with RoPE as trained (`none`),
with YaRN (`yarn`, factor length / training length) and with a raised base (`base`).

Metrics: `length_loss/<extend>/<length>` (mean next-token loss over every position of the
sequence, so the first training-length positions count too), and on Bigram-Backcopy
`length_copy/<extend>/<length>` (copy accuracy on trigger positions) and
`length_excess/<extend>/<length>` (loss above the Bayes-optimal loss of those same sequences).
A length at or below the training length is scored once, as trained, under every extension's name.
A length the held-out split cannot fill is skipped and said so (`gatesweep run` refuses it before launch).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from gatedmodels import RopeConfig, rope_override
from orchestrator.data import DataUnavailable, build_trial_data

from .heldout import perplexity


def extended_rope(extend: str, length: int, train_len: int, rope: RopeConfig, base: float) -> RopeConfig:
    """RoPE for a context of `length` tokens: as trained up to the training length; beyond it,
    YaRN with factor length / training length, or the base raised to `base` (the paper's 10k -> 1M)."""
    if length <= train_len or extend == "none":
        return rope
    if extend == "base":
        return rope.replace(base=max(rope.base, base))
    return rope.replace(scaling="yarn", factor=length / train_len, original_max_len=train_len)


@torch.no_grad()
def length_metrics(model, trial_cfg, *, device, progress: Callable[[str], None] | None = None) -> dict[str, float]:
    """`eval.length` of `trial_cfg` on `model` (an unwrapped GatedTransformer, restored as it was)."""
    ev = trial_cfg.eval.length
    train_len = trial_cfg.data.seq_len
    rope = trial_cfg.model.rope
    was_training = model.training
    model.eval()
    out: dict[str, float] = {}
    t0 = time.perf_counter()
    try:
        for length in ev.lengths:
            try:
                data = build_trial_data(trial_cfg.data.replace(seq_len=length), trial_cfg.train.seed)
            except DataUnavailable as err:  # a held-out split shorter than the length (refused at launch; `gatesweep eval` gets here)
                if progress:
                    progress(f"length {length}: skipped ({err})")
                continue
            batches = data.val_batches(ev.batches, ev.batch_size)
            scored: dict[str, dict[str, float]] = {}  # by RoPE settings: extensions that coincide are scored once
            for extend in ev.extend:
                r = extended_rope(extend, length, train_len, rope, ev.base)
                key = repr(r.to_dict())
                if key not in scored:
                    scored[key] = _score(model, data, batches, r, device)
                out.update({f"{name}/{extend}/{length}": value for name, value in scored[key].items()})
            if progress:
                progress(
                    f"length {length} ({length / train_len:g}x): "
                    + ", ".join(f"{e} loss {out[f'length_loss/{e}/{length}']:.3f}" for e in ev.extend)
                )
    finally:
        model.train(was_training)
    out["eval_time_s/length"] = time.perf_counter() - t0
    return out


def _score(model, data, batches: list[torch.Tensor], rope: RopeConfig, device) -> dict[str, float]:
    task: dict[str, list[float]] = {}

    def each(logits: torch.Tensor, seq: torch.Tensor) -> None:
        for k, v in data.task_metrics(logits.cpu(), seq.cpu()).items():
            task.setdefault(k, []).append(v)

    with rope_override(model, rope):
        p = perplexity(model, batches, data.token_bytes, device=device, each=each)
    res = {"length_loss": p.loss}
    if "bbc/copy_acc" in task:
        mean = {k: sum(v) / len(v) for k, v in task.items()}
        res["length_copy"] = mean["bbc/copy_acc"]
        res["length_excess"] = p.loss - mean["bbc/optimal_loss"]
    return res
