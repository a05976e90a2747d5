"""What lm-evaluation-harness benchmarks cost on CPU: documents per second per task for the
`small` preset (GPT-2 BPE; speed does not depend on the weights, so they are random), and the share
of a 2,000-step `small` text trial that the end-of-trial benchmarks take at the default
`eval.tasks.limit`. The trial's training time is projected from measured steps (a 2,000-step CPU
trial takes most of an hour) and said so.

    python benchmarks/harness_cost.py [--docs 20] [--steps 40]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))

from common import result, table

TASKS = ["hellaswag", "arc_easy", "arc_challenge", "piqa", "winogrande", "sciq", "lambada_openai", "mmlu", "gsm8k", "hellaswag_bpb"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--docs", type=int, default=20, help="documents per task (per subject for MMLU) to time")
    p.add_argument("--steps", type=int, default=40, help="training steps to time")
    args = p.parse_args()
    import torch

    from gatedmodels import GatedTransformer
    from orchestrator.data.tokenizers import gpt2_tokenizer
    from orchestrator.evals.harness import run_tasks
    from orchestrator.spec.evaluation import TasksConfig
    from orchestrator.spec.trial import TrialConfig
    from orchestrator.trial.run import TrialContext, run_trial

    tok = gpt2_tokenizer()
    cfg = TrialConfig.from_dict(
        {"model": {"size": "small", "gate": {"position": "G1"}}, "data": {"source": "shakespeare", "tokenizer": "gpt2"}}
    )
    model = GatedTransformer(cfg.model.replace(vocab_size=tok.vocab_size)).eval()
    torch.set_num_threads(os.cpu_count() or 1)
    default_limit = TasksConfig().limit
    rows, per_doc = [], {}
    for task in TASKS:
        docs = args.docs  # GSM8k too: generation is KV-cached (up to 256 new tokens per question)
        t0 = time.perf_counter()
        out = run_tasks(model, tok, [task], limit=docs, max_len=2048, batch_size=16)
        seconds = time.perf_counter() - t0
        n = docs * (57 if task == "mmlu" else 1)
        per_doc[task] = seconds / n
        rows.append(
            {
                "task": task,
                "documents": n,
                "seconds": f"{seconds:.1f}",
                "docs/s": f"{n / seconds:.2f}",
                "requests": int(out["harness/requests"]),
            }
        )
        result(f"harness {task}: documents per second (small preset, CPU)", round(n / seconds, 2), "(context)", True, "docs/s")
    print(table(rows, ["task", "documents", "seconds", "docs/s", "requests"]))

    with tempfile.TemporaryDirectory() as tmp:
        trial = TrialConfig.from_dict(
            {
                "model": {"size": "small", "gate": {"position": "G1"}},
                "data": {"source": "shakespeare", "tokenizer": "gpt2", "seq_len": 256},
                "train": {"steps": args.steps, "batch_size": 16, "eval_every": 0, "log_every": 10, "warmup_steps": 5},
                "eval": {"batches": 1, "batch_size": 8, "probe_sequences": 4},
            }
        )
        r = run_trial(trial, TrialContext(run_dir=Path(tmp) / "t", tracking_uri=f"sqlite:///{Path(tmp) / 'mlflow.db'}"))
        step_s = r.metrics["train_time_s"] / args.steps
    train_2000 = 2000 * step_s
    suite = ["hellaswag", "arc_easy", "arc_challenge", "piqa", "winogrande", "sciq", "lambada_openai", "mmlu"]
    bench = sum(per_doc[t] * default_limit * (57 if t == "mmlu" else 1) for t in suite)
    share = bench / (train_2000 + bench)
    print(
        f"2,000-step small trial (batch 16 x 256 tokens): {train_2000 / 60:.0f} min projected from {args.steps} measured steps; "
        f"harness suite {', '.join(suite)} at limit {default_limit}: {bench / 60:.0f} min"
    )
    result(
        f"harness suite at limit {default_limit}, share of a 2,000-step small trial",
        round(100 * share, 1),
        "(context)",
        True,
        "%",
        note="training projected from measured steps",
    )


if __name__ == "__main__":
    main()
