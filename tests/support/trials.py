"""The small trial config of the trial tests and the example trial file with fast overrides."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.spec.trial import TrialConfig

SMALL = {
    "model": {"size": "bigram-1l", "gate": {"position": "G1"}},
    "data": {"source": "bigram-backcopy", "seq_len": 32},
    "train": {"steps": 40, "batch_size": 8, "warmup_steps": 5, "eval_every": 20, "log_every": 1, "checkpoint_every": 10, "lr": 3e-3},
    "eval": {"batches": 2, "batch_size": 8, "probe_sequences": 4},
}


def cfg(**over) -> TrialConfig:
    data = json.loads(json.dumps(SMALL))
    for section, values in over.items():
        data[section] = {**data.get(section, {}), **values}
    return TrialConfig.from_dict(data)


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "bigram_g1.yaml"
FAST = [
    "--set",
    "train.steps=12",
    "--set",
    "train.eval_every=6",
    "--set",
    "train.log_every=3",
    "--set",
    "train.checkpoint_every=6",
    "--set",
    "data.seq_len=32",
    "--set",
    "eval.batches=1",
    "--set",
    "eval.batch_size=8",
    "--set",
    "eval.probe_sequences=4",
]
