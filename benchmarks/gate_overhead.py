"""Training-step time of each G1 gate variant divided by the ungated model's.

Same shapes, same batch, AdamW step included, variants interleaved round by round. Besides the
wall-time ratio it prints the gate's share of the model's matmul FLOPs, and the measured
overhead divided by that share: on a compute-bound CPU a gate cannot cost less than its FLOPs
(REFERENCE §2b), so "overhead / FLOP share <= 1.1" is the CPU goal for elementwise gates and
"ratio <= 1.02" the goal for headwise gates and GPU runs.

    python benchmarks/gate_overhead.py [--preset small] [--batch 8] [--seq 256] [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import torch
import torch.nn.functional as F
from common import interleaved, ratios, result, table

from gatedmodels import GatedTransformer, ModelConfig

VARIANTS = {
    "none": dict(position="none"),
    "G1 elementwise": dict(position="G1"),
    "G1 headwise": dict(position="G1", granularity="headwise"),
    "G1 head-shared": dict(position="G1", sharing="head_shared"),
    "G1 input-indep.": dict(position="G1", input_dependent=False),
}


def matmul_flops_per_token(cfg: ModelConfig, model: GatedTransformer, seq: int) -> float:
    """Forward matmul FLOPs per token: 2 x (linear weights used) + causal attention (QK^T and AV)."""
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    if cfg.tie_embeddings:
        linear += model.embed.weight.numel()
    attention = 2 * 2 * cfg.n_layers * cfg.q_dim * seq / 2
    return 2 * linear + attention


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="small")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    steps, flops = {}, {}
    for name, gate in VARIANTS.items():
        cfg = ModelConfig.preset(args.preset, gate=gate)
        torch.manual_seed(0)
        model = GatedTransformer(cfg)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        x = torch.randint(0, cfg.vocab_size, (args.batch, args.seq + 1), generator=torch.Generator().manual_seed(0))

        def step(model=model, opt=opt, x=x):
            logits = model(x[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten())
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        steps[name] = step
        flops[name] = matmul_flops_per_token(cfg, model, args.seq)

    times = interleaved(steps, rounds=args.rounds, reps=args.reps)
    rel = ratios(times, "none")
    rows = []
    for name in VARIANTS:
        share = flops[name] / flops["none"] - 1
        over = rel[name] - 1
        rows.append(
            {
                "variant": name,
                "step ms": f"{1000 * min(times[name]):.1f}",
                "ratio vs none": f"{rel[name]:.3f}",
                "gate FLOP share": f"{100 * share:+.1f}%",
                "overhead / FLOP share": f"{over / share:.2f}" if share > 0.005 else "-",
            }
        )
    print(
        f"gate overhead: preset {args.preset}, batch {args.batch} x seq {args.seq}, {args.threads} threads, "
        f"{args.rounds} interleaved rounds x {args.reps} steps, median of per-round ratios"
    )
    print(table(rows, list(rows[0])))
    el, hw = "G1 elementwise", "G1 headwise"
    share = flops[el] / flops["none"] - 1
    result("gate overhead, G1 headwise (step-time ratio)", round(rel[hw], 3), "<= 1.02", rel[hw] <= 1.02)
    result(
        "gate overhead, G1 elementwise (step-time ratio)",
        round(rel[el], 3),
        "<= 1.02 (GPU goal)",
        rel[el] <= 1.02,
        note=f"FLOP share {100 * share:+.1f}%",
    )
    result(
        "gate overhead, G1 elementwise / its FLOP share", round((rel[el] - 1) / share, 2), "<= 1.1 (CPU goal)", (rel[el] - 1) / share <= 1.1
    )


if __name__ == "__main__":
    main()
