"""Model FLOPs utilisation of a ~0.5B preset (`dense-0.5b`) trained in bf16 with DeepSpeed on one
GPU, with and without the G1 elementwise gate. Needs a CUDA GPU; prints a note and exits 0 without.

MFU = (6 x parameters per token + 12 x layers x d_attn x seq) x tokens/s / peak bf16 FLOP/s.

    python benchmarks/gpu_mfu.py [--steps 30] [--batch 8] [--seq 2048] [--peak-tflops 989]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))

from common import result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--peak-tflops", type=float, default=989.0, help="peak dense bf16 TFLOP/s (H100/H200 SXM: 989)")
    args = p.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU here: MFU not measured")
        result("MFU of dense-0.5b, bf16 + DeepSpeed (GPU)", "-", "(report)", None, note="needs a GPU")
        return
    from gatedmodels import build_meta
    from orchestrator.spec.trial import TrialConfig
    from orchestrator.trial.run import TrialContext, run_trial

    for gate in ("none", "G1"):
        cfg = TrialConfig.from_dict(
            {
                "model": {"size": "dense-0.5b", "gate": {"position": gate}},
                "data": {"source": "shakespeare", "tokenizer": "gpt2", "seq_len": args.seq},
                "train": {"steps": args.steps, "batch_size": args.batch, "eval_every": 0, "log_every": 10, "warmup_steps": 5},
                "deepspeed": {"precision": "bf16"},
                "eval": {"batches": 1, "batch_size": 2, "probe_sequences": 1},
            }
        )
        with tempfile.TemporaryDirectory() as tmp:
            r = run_trial(cfg, TrialContext(run_dir=Path(tmp) / "r", tracking_uri=f"sqlite:///{Path(tmp) / 'm.db'}"))
        m = build_meta(cfg.model.replace(vocab_size=50257))
        per_token = 6 * (m.active_params() + m.embed.weight.numel()) + 12 * cfg.model.n_layers * cfg.model.q_dim * args.seq
        mfu = per_token * r.metrics["tokens_per_s"] / (args.peak_tflops * 1e12)
        print(f"{gate}: {r.metrics['tokens_per_s']:,.0f} tokens/s, MFU {100 * mfu:.1f}% on {torch.cuda.get_device_name()}")
        result(f"MFU of dense-0.5b, bf16 + DeepSpeed, gate {gate}", round(100 * mfu, 1), "(report)", None, "%")


if __name__ == "__main__":
    main()
