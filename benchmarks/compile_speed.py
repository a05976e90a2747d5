"""torch.compile and activation checkpointing on the `small` preset (G1 elementwise), CPU:
steady-state tokens/s of a training step (forward, cross-entropy, backward, AdamW) compiled ÷
eager, measured in alternating rounds after each variant's warm-up (compilation is timed apart,
as `train.compile` reports it as `first_step_s`); and with `train.activation_checkpointing:
blocks`, peak memory of the step (the autograd graph's saved tensors, by saved-tensor hooks) ÷
without, and its tokens/s cost.

    python benchmarks/compile_speed.py [--batch 8] [--seq 256] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))

from common import interleaved, ratios, result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    import torch
    import torch.nn.functional as F

    from gatedmodels import GatedTransformer
    from gatedmodels.config import ModelConfig

    cfg = ModelConfig.preset("small", gate={"position": "G1"}).replace(vocab_size=257)
    ids = torch.randint(0, 257, (args.batch, args.seq + 1))

    def trainer(model):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step() -> None:
            logits = model(ids[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        return step

    torch.manual_seed(0)
    eager = GatedTransformer(cfg)
    torch.manual_seed(0)
    base = GatedTransformer(cfg)
    compiled = torch.compile(base)
    steps = {"eager": trainer(eager), "compiled": trainer(compiled)}
    t0 = time.perf_counter()
    steps["compiled"]()
    steps["compiled"]()
    compile_s = time.perf_counter() - t0
    times = interleaved(steps, rounds=args.rounds, reps=2, warmup=1)
    speed = 1 / ratios(times, "eager")["compiled"]
    tokens = args.batch * args.seq
    print(
        f"small preset G1 elementwise, batch {args.batch} x {args.seq}: eager {tokens / min(times['eager']):,.0f} tokens/s, "
        f"compiled {tokens / min(times['compiled']):,.0f} tokens/s; first two compiled steps {compile_s:.0f} s"
    )
    result("torch.compile / eager tokens/s (small, G1 elementwise, CPU)", round(speed, 3), ">= 1.2 or explained", speed >= 1.2)

    torch.manual_seed(0)
    ckpt = GatedTransformer(cfg)
    ckpt.checkpoint_blocks = True
    ckpt.train()

    def saved_bytes(model) -> int:
        total = 0

        def pack(t):
            nonlocal total
            total += t.numel() * t.element_size()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            logits = model(ids[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
        loss.backward()
        model.zero_grad(set_to_none=True)
        return total

    mem = saved_bytes(ckpt) / saved_bytes(eager)
    times = interleaved({"eager": trainer(eager), "checkpointed": trainer(ckpt)}, rounds=args.rounds, reps=2, warmup=1)
    cost = ratios(times, "eager")["checkpointed"]
    print(f"activation checkpointing (blocks): saved activations {mem:.2f}x, step time {cost:.2f}x")
    result("activation checkpointing: saved activations / without (small, batch 8 x 256)", round(mem, 3), "(context)", True)
    result("activation checkpointing: step time / without", round(cost, 3), "(context)", True)


if __name__ == "__main__":
    main()
