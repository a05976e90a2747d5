"""What evaluation costs inside a trial, measured on real trials:

- the periodic probe evaluation (held-out loss + explicit-attention probes every eval_every steps)
  as a share of the trial's training time, for the quickstart's settings. Goal <= 5%;
- the end-of-trial benchmarks' (harness tasks, RULER-style, a perplexity set) share of a short
  text trial. Per-task speed of the harness tasks: `harness_cost.py`.

    python benchmarks/eval_cost.py
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))

from common import result


def main() -> None:
    from orchestrator.spec.trial import TrialConfig
    from orchestrator.trial.run import TrialContext, run_trial

    with tempfile.TemporaryDirectory() as tmp:
        uri = f"sqlite:///{Path(tmp) / 'mlflow.db'}"
        probe = TrialConfig.from_dict(
            {
                "model": {"size": "bigram-1l", "gate": {"position": "G1"}},
                "data": {"seq_len": 64},
                "train": {"steps": 1000, "batch_size": 32, "lr": 1e-2, "eval_every": 500, "log_every": 50},
                "eval": {"batches": 2, "batch_size": 16, "probe_sequences": 32},
            }
        )
        r = run_trial(probe, TrialContext(run_dir=Path(tmp) / "probe", tracking_uri=uri))
        share = r.metrics["eval_time_s/periodic"] / r.metrics["train_time_s"]
        print(
            f"quickstart-sized trial: training {r.metrics['train_time_s']:.1f} s, periodic evaluation "
            f"{r.metrics['eval_time_s/periodic']:.2f} s (3 evaluations)"
        )
        result("evaluation probes, share of trial training time", round(100 * share, 2), "<= 5%", share <= 0.05, "%")

        text = TrialConfig.from_dict(
            {
                "model": {"size": "small", "gate": {"position": "G1"}},
                "data": {"source": "shakespeare", "tokenizer": "gpt2", "seq_len": 256},
                "train": {"steps": 200, "batch_size": 8, "eval_every": 0, "log_every": 20},
                "eval": {
                    "batches": 2,
                    "batch_size": 8,
                    "probe_sequences": 8,
                    "tasks": {"names": ["mmlu", "hellaswag"], "limit": 2, "max_len": 1024, "batch_size": 4},
                    "ruler": {"enabled": True, "tasks": ["niah_single", "fwe"], "lengths": [512], "samples": 2},
                    "ppl_sets": ["kjv"],
                },
            }
        )
        r = run_trial(text, TrialContext(run_dir=Path(tmp) / "text", tracking_uri=uri))
        m = r.metrics
        print(
            f"small preset, GPT-2 BPE: harness tasks (MMLU 2/subject, HellaSwag 2) {m['eval_time_s/harness']:.1f} s; "
            f"RULER-style {m['eval_time_s/ruler']:.1f} s; perplexity set {m['eval_time_s/ppl']:.1f} s; "
            f"training {m['train_time_s']:.1f} s"
        )
        bench_share = m["eval_time_s/benchmarks"] / (m["train_time_s"] + m["eval_time_s/benchmarks"])
        result(
            "end-of-trial benchmarks, share of a 200-step text trial",
            round(100 * bench_share, 1),
            "(context)",
            True,
            "%",
            note="MMLU 2/subject + HellaSwag 2 (harness), RULER 2 tasks x 2 @512, kjv perplexity",
        )


if __name__ == "__main__":
    main()
