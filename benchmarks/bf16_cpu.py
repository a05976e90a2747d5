"""bf16 on a CPU: `deepspeed.precision: bf16` (DeepSpeed's mixed precision, the GPU path: bf16
weights and activations, fp32 master weights and optimizer state) against fp32, the `small`
preset with the G1 gate on byte-level Shakespeare. Both engines are real DeepSpeed engines built
by the trial code (`orchestrator.trial.run.build`) from one config, same seed, same batches; their
training steps alternate in rounds, so the tokens/s ratio is measured side by side. Their
training losses over the run are printed too: what bf16 does to the numbers, without a GPU.

    python benchmarks/bf16_cpu.py [--steps-per-round 5] [--rounds 8] [--batch 8] [--seq 256]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(__file__))

from common import interleaved, ratios, result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps-per-round", type=int, default=5)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    args = p.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    import torch
    import torch.nn.functional as F

    from orchestrator.spec.trial import TrialConfig
    from orchestrator.trial.distributed import process_group
    from orchestrator.trial.run import build

    def config(precision: str) -> TrialConfig:
        return TrialConfig.from_dict(
            {
                "model": {"size": "small", "gate": {"position": "G1"}},
                "data": {"source": "shakespeare", "tokenizer": "byte", "seq_len": args.seq},
                "train": {"batch_size": args.batch, "lr": 2e-3, "warmup_steps": 10, "steps": 10_000},
                "deepspeed": {"precision": precision},
            }
        )

    with process_group():
        built = {name: build(config(name)) for name in ("fp32", "bf16")}
        dtypes = {name: str(next(b.engine.module.parameters()).dtype) for name, b in built.items()}
        losses: dict[str, list[float]] = {name: [] for name in built}

        def trainer(name: str):
            b = built[name]

            def steps() -> None:
                for _ in range(args.steps_per_round):
                    seq = b.data.train_batch(len(losses[name]), args.batch, 0, 1)
                    logits = b.engine(seq[:, :-1])
                    loss = F.cross_entropy(logits.float().flatten(0, 1), seq[:, 1:].flatten())
                    b.engine.backward(loss)
                    b.engine.step()
                    losses[name].append(loss.item())

            return steps

        times = interleaved({name: trainer(name) for name in built}, rounds=args.rounds, reps=1, warmup=1)
    speed = 1 / ratios(times, "fp32")["bf16"]
    tokens = args.batch * args.seq * args.steps_per_round
    n = len(losses["fp32"])
    tail = max(1, n // 4)
    last = {name: statistics.mean(v[-tail:]) for name, v in losses.items()}
    gap = max(abs(a - b) for a, b in zip(losses["fp32"], losses["bf16"]))
    print(
        f"small G1, batch {args.batch} x {args.seq}, {torch.get_num_threads()} threads: parameters {dtypes['fp32']} / {dtypes['bf16']}; "
        f"tokens/s fp32 {tokens / min(times['fp32']):,.0f}, bf16 {tokens / min(times['bf16']):,.0f}"
    )
    print(
        f"training loss after {n} steps (mean of the last {tail}): fp32 {last['fp32']:.4f}, bf16 {last['bf16']:.4f}; "
        f"largest per-step difference {gap:.4f} (first step: {losses['fp32'][0]:.4f} vs {losses['bf16'][0]:.4f})"
    )
    result("bf16 / fp32 training tokens/s, DeepSpeed on CPU (small, G1)", round(speed, 3), "(context)", True)
    result(
        f"bf16 - fp32 training loss after {n} steps (small, G1, Shakespeare bytes)",
        round(last["bf16"] - last["fp32"], 4),
        "(context)",
        True,
    )


if __name__ == "__main__":
    main()
