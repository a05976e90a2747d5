"""Which harness tasks a laptop-trained model lifts above chance, and by how much.

Trains the `small` preset (G1 elementwise gate) on the offline Wikipedia sample, byte-level, for
`--steps` steps (a real `run_trial`), then runs the harness tasks on it and on the same architecture
untrained (random weights, same seed), `--limit` documents per task (per subject for MMLU). Prints
one row per metric: untrained, trained, the difference in standard errors, and chance. Not part of
run_all.py (it takes most of an hour on 2 cores); the README's table is its output.

    python benchmarks/harness_lift.py [--steps 1500] [--limit 500] [--mmlu-limit 20]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))

from common import table

MC = {"hellaswag": 0.25, "arc_easy": 0.25, "arc_challenge": 0.25, "piqa": 0.5, "winogrande": 0.5, "sciq": 0.25}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--limit", type=int, default=500)
    p.add_argument("--mmlu-limit", type=int, default=20)
    args = p.parse_args()
    import torch

    from gatedmodels import GatedTransformer
    from orchestrator.evals.harness import run_tasks
    from orchestrator.spec.trial import TrialConfig
    from orchestrator.trial.run import TrialContext, run_trial

    cfg = TrialConfig.from_dict(
        {
            "model": {"size": "small", "gate": {"position": "G1"}},
            "data": {"source": "wikipedia", "tokenizer": "byte", "seq_len": 256},
            "train": {"steps": args.steps, "batch_size": 16, "lr": 2.0e-3, "warmup_steps": 50, "eval_every": 0, "log_every": 100},
            "eval": {"batches": 4, "batch_size": 16, "probe_sequences": 8},
        }
    )
    tasks = [*MC, *(f"{t}_bpb" for t in MC if t != "winogrande"), "lambada_openai"]
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        r = run_trial(cfg, TrialContext(run_dir=Path(tmp) / "t", tracking_uri=f"sqlite:///{Path(tmp) / 'mlflow.db'}"))
        print(f"trained {args.steps} steps in {(time.perf_counter() - t0) / 60:.1f} min: val_bpb {r.metrics['val_bpb']:.3f}")
        from orchestrator.data import build_trial_data

        tok = build_trial_data(cfg.data, cfg.train.seed).tokenizer
        blob = torch.load(Path(tmp) / "t" / "model.pt", weights_only=True)
        model_cfg = TrialConfig.from_dict(blob["config"]).model
        trained = GatedTransformer(model_cfg)
        trained.load_state_dict(blob["model"])
    torch.manual_seed(cfg.train.seed)
    untrained = GatedTransformer(model_cfg)
    results = {}
    for label, model in (("untrained", untrained), ("trained", trained)):
        model.eval()
        t0 = time.perf_counter()
        out = run_tasks(model, tok, tasks, limit=args.limit, max_len=1024, batch_size=16)
        out.update(run_tasks(model, tok, ["mmlu"], limit=args.mmlu_limit, max_len=2048, batch_size=16))
        results[label] = out
        print(f"{label}: harness in {(time.perf_counter() - t0) / 60:.1f} min")
    rows = []
    keys = [f"{t}/acc" for t in MC] + [f"{t}/acc_norm" for t in MC if t != "winogrande"] + ["mmlu/acc", "lambada_openai/acc"]
    keys += [f"{t}_bpb/bits_per_byte" for t in MC if t != "winogrande"] + ["lambada_openai/perplexity"]
    for key in keys:
        u, t = results["untrained"].get(key), results["trained"].get(key)
        if u is None or t is None:
            continue
        se = results["trained"].get(f"{key}_stderr") or float("nan")
        chance = {**MC, "mmlu": 0.25}.get(key.split("/")[0]) if key.endswith(("/acc", "/acc_norm")) else None
        above = (t - chance) / se if chance is not None and se and math.isfinite(se) else float("nan")
        rows.append(
            {
                "metric": key,
                "untrained": f"{u:.4g}",
                "trained": f"{t:.4g}",
                "stderr": f"{se:.3g}",
                "chance": "" if chance is None else f"{chance:.2f}",
                "(trained - chance) / stderr": "" if not math.isfinite(above) else f"{above:+.1f}",
            }
        )
    print(table(rows, ["metric", "untrained", "trained", "stderr", "chance", "(trained - chance) / stderr"]))


if __name__ == "__main__":
    main()
