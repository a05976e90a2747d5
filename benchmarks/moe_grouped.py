"""MoE layer forward + backward: the token-sorted batched path (`moe.impl: grouped`) against the
per-expert loop (`loop`, the reference), tokens/s side by side in alternating rounds.

Goal (issue 18): >= 3x at E 64, top-8, d_model 256, expert width 128 on CPU. Also printed: the
`moe-15a2b` layer shape (128 experts, top-8, d_model 2048, expert width 768) when --big is given
(minutes on a CPU; the GPU check runs it on a GPU).

A third variant, `matmuls`, is the floor any implementation has to pay: the experts' SwiGLUs
forward and backward on inputs already sorted into contiguous per-expert blocks (no routing, no
gather, no scatter). loop / matmuls is the most a faster MoE could gain over the loop on this
device; on a CPU it is under 2, which is why the >= 3 goal cannot be met there.

    python benchmarks/moe_grouped.py [--tokens 4096] [--rounds 5] [--big]
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from common import interleaved, ratios, result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--big", action="store_true")
    p.add_argument("--device", default="cpu", help="cpu or cuda (bf16 on cuda)")
    args = p.parse_args()
    import torch

    from gatedmodels.config import ModelConfig
    from gatedmodels.layers import MoE

    shapes = [("E64 top-8 d256 h128", 64, 8, 256, 128)]
    if args.big:
        shapes.append(("moe-15a2b layer: E128 top-8 d2048 h768", 128, 8, 2048, 768))
    for label, E, K, D, H in shapes:
        cfg = ModelConfig.from_dict(
            {
                "d_model": D,
                "n_layers": 1,
                "n_heads": 8,
                "n_kv_heads": 8,
                "vocab_size": 128,
                "moe": {"n_experts": E, "top_k": K, "expert_dim": H},
            }
        )
        torch.manual_seed(0)
        dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
        layer = MoE(cfg).to(args.device, dtype)
        x = torch.randn(1, args.tokens, D, device=args.device, dtype=dtype, requires_grad=True)

        def step(impl: str, layer=layer, x=x):
            def run() -> None:
                layer.impl = impl
                layer.zero_grad(set_to_none=True)
                layer(x).square().mean().backward()
                if args.device == "cuda":
                    torch.cuda.synchronize()

            return run

        with torch.no_grad():
            counts = torch.bincount(layer.router(x[0]).topk(K, dim=-1).indices.flatten(), minlength=E).tolist()
        blocks = [torch.randn(n, D, device=args.device, dtype=dtype, requires_grad=True) for n in counts]

        def matmuls(layer=layer, blocks=blocks):
            layer.zero_grad(set_to_none=True)
            sum(e(b).square().mean() for e, b in zip(layer.experts, blocks) if len(b)).backward()
            if args.device == "cuda":
                torch.cuda.synchronize()

        variants = {"loop": step("loop"), "grouped": step("grouped"), "matmuls": matmuls}
        times = interleaved(variants, rounds=args.rounds, reps=2, warmup=1)
        r = ratios(times, "loop")
        speedup, ceiling = 1 / r["grouped"], 1 / r["matmuls"]
        rates = ", ".join(f"{k} {args.tokens / min(v):,.0f}" for k, v in times.items())
        print(f"{label}: tokens/s {rates} (fwd+bwd, {args.tokens} tokens, largest expert {max(counts)} of mean {sum(counts) / E:.0f})")
        result(f"MoE loop / its matmuls alone, {label}, {args.device} (the most any MoE can gain)", round(ceiling, 2), "(context)", True)
        result(
            f"MoE grouped / loop tokens/s, {label}, {args.device}",
            round(speedup, 2),
            ">= 3" if not label.startswith("moe-15a2b") else "(context)",
            speedup >= 3,
        )


if __name__ == "__main__":
    main()
