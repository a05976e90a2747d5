"""Tokens/s of the `gatesweep train` training loop divided by a bare torch loop's, same model and
batch shape, alternating every few steps in one process.

The trial side is the real loop (`orchestrator.trial.trainer`: data pipeline, DeepSpeed engine, spike
rules, step metrics logged to a temporary MLflow SQLite store), stepped with the same method the
trial runs; the bare side is forward, cross-entropy, backward, gradient clipping, AdamW and the LR
schedule on one fixed batch. Goal: ratio >= 0.95. A full trial's one-off cost outside its training
steps (DeepSpeed init, data, MLflow run, final evaluation, checkpoint, artifacts) is printed too.

    python benchmarks/trainer_overhead.py [--preset small] [--rounds 8] [--steps 5]
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

import torch
import torch.nn.functional as F
from common import result

from gatedmodels import GatedTransformer
from orchestrator.data import build_trial_data
from orchestrator.spec.trial import TrialConfig
from orchestrator.trial.callbacks.mlflow_logging import MLflowLogging
from orchestrator.trial.distributed import process_group
from orchestrator.trial.optim import lr_lambda, param_groups
from orchestrator.trial.run import TrialContext, build, make_trainer, run_trial


def trial_config(args, steps: int) -> TrialConfig:
    return TrialConfig.from_dict(
        {
            "model": {"size": args.preset, "gate": {"position": "G1"}},
            "data": {"source": args.source, "seq_len": args.seq},
            "train": {
                "steps": steps,
                "batch_size": args.batch,
                "log_every": 10,
                "eval_every": 0,
                "warmup_steps": 5,
                "threads": args.threads,
            },
            "eval": {"batches": 1, "batch_size": 4, "probe_sequences": 4},
        }
    )


class Bare:
    """The plainest loop that trains the same model on a fixed batch."""

    def __init__(self, cfg: TrialConfig):
        data = build_trial_data(cfg.data, cfg.train.seed)
        torch.manual_seed(cfg.train.seed)
        self.model = GatedTransformer(cfg.model.replace(vocab_size=data.vocab_size))
        self.opt = torch.optim.AdamW(param_groups(self.model, cfg.train.weight_decay), lr=cfg.train.lr, betas=tuple(cfg.train.betas))
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lr_lambda(cfg.train))
        self.seq = data.train_batch(0, cfg.train.batch_size)
        self.clip = cfg.train.grad_clip

    def step(self) -> None:
        logits = self.model(self.seq[:, :-1])
        loss = F.cross_entropy(logits.float().flatten(0, 1), self.seq[:, 1:].flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        self.opt.step()
        self.sched.step()
        self.opt.zero_grad(set_to_none=True)
        assert math.isfinite(loss.item())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="small")
    p.add_argument("--source", default="shakespeare")
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--steps", type=int, default=5, help="steps per side per round")
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    total = 2 + args.rounds * args.steps
    cfg = trial_config(args, total)
    tokens = args.batch * args.seq
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        uri = f"sqlite:///{Path(tmp) / 'mlflow.db'}"
        ctx = TrialContext(run_dir=Path(tmp) / "loop", tracking_uri=uri, resume=False)
        ctx.run_dir.mkdir()
        with process_group() as (rank, world), torch.enable_grad():
            tracker = MLflowLogging(cfg, ctx)
            tracker.open()
            trainer = make_trainer(cfg, ctx, build(cfg, world), rank=rank, world=world, tracker=tracker)
            trainer.start()
            bare = Bare(cfg)
            for _ in range(2):  # warm-up both sides
                trainer.advance()
                bare.step()
            for r in range(args.rounds):
                sides = [("trial", trainer.advance), ("bare", bare.step)]
                times = {}
                for name, fn in sides if r % 2 == 0 else reversed(sides):
                    t0 = time.perf_counter()
                    for _ in range(args.steps):
                        fn()
                    times[name] = time.perf_counter() - t0
                ratios.append(times["bare"] / times["trial"])  # tokens/s ratio = inverse time ratio
            tracker.logger.finish()
        t0 = time.perf_counter()
        full = run_trial(trial_config(args, 20), TrialContext(run_dir=Path(tmp) / "full", tracking_uri=uri))
        fixed = time.perf_counter() - t0 - full.train_s
    r = statistics.median(ratios)
    print(
        f"trainer overhead: preset {args.preset}, {args.source}, batch {args.batch} x seq {args.seq} ({tokens} tokens/step), "
        f"{args.threads} threads; {args.rounds} rounds of {args.steps} steps per side, alternating"
    )
    print("per-round tokens/s ratio (trial / bare): " + ", ".join(f"{x:.3f}" for x in ratios))
    print(f"median {r:.3f} (goal >= 0.95); one 20-step trial's cost outside its training steps: {fixed:.2f} s")
    result("trainer tokens/s over a bare torch loop", round(r, 3), ">= 0.95", r >= 0.95)
    result(
        "in-process trial cost outside training steps",
        round(fixed, 2),
        "(context)",
        True,
        "s",
        note="DeepSpeed init, data, MLflow run, final evaluation, checkpoint, artifacts",
    )


if __name__ == "__main__":
    main()
