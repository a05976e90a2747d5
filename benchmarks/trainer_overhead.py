"""Tokens/s of a `gatesweep train` trial divided by a bare torch training loop's, same model and
batch shape, measured in alternating rounds in one process.

The trial is the real thing (`run_trial`: data pipeline, DeepSpeed engine, spike detection,
MLflow logging into a temporary SQLite store); its `tokens_per_s` counts training steps only,
as the trial reports it. The bare loop is forward, cross-entropy, backward, gradient clipping,
AdamW and the LR schedule on one fixed batch. Goal: ratio >= 0.95. The per-trial fixed cost
(wall time minus training time: imports excluded, DeepSpeed init, data, MLflow, evaluation,
checkpoint and artifacts) is printed beside it.

    python benchmarks/trainer_overhead.py [--preset small] [--steps 30] [--rounds 3]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from common import result, table  # noqa: E402
from gatedmodels import GatedTransformer  # noqa: E402
from orchestrator.config import TrialConfig  # noqa: E402
from orchestrator.data import build_trial_data  # noqa: E402
from orchestrator.trial import TrialContext, lr_lambda, param_groups, run_trial  # noqa: E402


def trial_config(args) -> TrialConfig:
    return TrialConfig.from_dict({
        "model": {"size": args.preset, "gate": {"position": "G1"}},
        "data": {"source": args.source, "seq_len": args.seq},
        "train": {"steps": args.steps, "batch_size": args.batch, "log_every": 10, "eval_every": 0, "warmup_steps": 5},
        "eval": {"batches": 1, "batch_size": 4, "probe_sequences": 4},
    })


def bare_loop(cfg: TrialConfig, steps: int) -> float:
    """Tokens/s of the plainest loop that trains the same model on a fixed batch."""
    data = build_trial_data(cfg.data, cfg.train.seed)
    torch.manual_seed(cfg.train.seed)
    model = GatedTransformer(cfg.model.replace(vocab_size=data.vocab_size))
    opt = torch.optim.AdamW(param_groups(model, cfg.train.weight_decay), lr=cfg.train.lr, betas=tuple(cfg.train.betas))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg.train))
    seq = data.train_batch(0, cfg.train.batch_size)
    timed = 0.0
    for step in range(steps):
        t0 = time.perf_counter()
        logits = model(seq[:, :-1])
        loss = F.cross_entropy(logits.float().flatten(0, 1), seq[:, 1:].flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.grad_clip)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        assert math.isfinite(loss.item())
        if step:  # like the trial, skip the first step's one-off costs
            timed += time.perf_counter() - t0
    return (steps - 1) * cfg.train.batch_size * cfg.data.seq_len / timed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="small")
    p.add_argument("--source", default="shakespeare")
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    cfg = trial_config(args)
    bare_loop(cfg, 3)  # warm caches (tokenised corpus, allocator) for both sides
    rows, ratios, fixed = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        uri = f"sqlite:///{Path(tmp) / 'mlflow.db'}"
        for r in range(args.rounds):
            t0 = time.perf_counter()
            result = run_trial(cfg.replace(train=cfg.train.replace(threads=args.threads)),
                               TrialContext(run_dir=Path(tmp) / f"r{r}", tracking_uri=uri, resume=False))
            wall = time.perf_counter() - t0
            trial_tps = result.metrics["tokens_per_s"]
            bare_tps = bare_loop(cfg, args.steps)
            ratios.append(trial_tps / bare_tps)
            fixed.append(wall - result.train_s)
            rows.append({"round": r, "trial tok/s": f"{trial_tps:,.0f}", "bare tok/s": f"{bare_tps:,.0f}",
                         "ratio": f"{trial_tps / bare_tps:.3f}", "trial fixed cost s": f"{wall - result.train_s:.2f}"})
    print(f"trainer overhead: preset {args.preset}, {args.source}, batch {args.batch} x seq {args.seq}, "
          f"{args.steps} steps per side, {args.rounds} alternating rounds, {args.threads} threads")
    print(table(rows, list(rows[0])))
    print(f"median ratio (trial / bare loop): {statistics.median(ratios):.3f}   goal >= 0.95")
    print(f"median fixed cost per trial outside training steps: {statistics.median(fixed):.2f} s")
    r = statistics.median(ratios)
    result("trainer tokens/s over a bare torch loop", round(r, 3), ">= 0.95", r >= 0.95)
    f = statistics.median(fixed)
    result("in-process trial cost outside training steps", round(f, 2), "(context)", True, "s",
           note="DeepSpeed init, data, MLflow run, final evaluation and artifacts")


if __name__ == "__main__":
    main()
