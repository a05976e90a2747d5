"""One real sweep per test session, shared by the dashboards tests.

A tiny Bigram-Backcopy grid (gate none / G1 x seeds 0, 1) plus one diverging cell (lr 1e10,
no clipping, seed 0, gate none) that FAILS, launched through the real CLI on the session's Ray
(`shared_ray`) into a SQLite store, ~40-60 s. Then a second sweep over the same four finished cells, which reuses them
(`gatesweep.also_in.<name>` tags) without training anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.support.cli import gatesweep

BASE = {
    "model": {"size": "bigram-1l"},
    "data": {"seq_len": 32},
    "train": {"steps": 30, "batch_size": 8, "warmup_steps": 2, "eval_every": 15, "log_every": 5},
    "eval": {"batches": 1, "batch_size": 8, "probe_sequences": 4},
}
SWEEP = {
    "name": "cmp",
    "base": BASE,
    "grid": {"model.gate.position": ["none", "G1"], "train.seed": [0, 1]},
    "zip": [{"train.lr": [0.003, 1.0e10], "train.grad_clip": [1.0, 0.0]}],
    "exclude": [{"model.gate.position": "G1", "train.lr": 1.0e10}, {"train.seed": 1, "train.lr": 1.0e10}],
    "tracking": {"experiment": "dash"},
}
REUSE = {
    "name": "cmp-again",
    "base": {**BASE, "train": {**BASE["train"], "lr": 0.003, "grad_clip": 1.0}},
    "grid": {"model.gate.position": ["none", "G1"], "train.seed": [0, 1]},
    "tracking": {"experiment": "dash"},
}


@dataclass
class Store:
    root: Path
    uri: str
    db: Path
    run_log: str


@pytest.fixture(scope="session")
def store(tmp_path_factory, shared_ray) -> Store:
    root = tmp_path_factory.mktemp("dashboards-store")
    db = root / "mlflow.db"
    uri = f"sqlite:///{db}"
    logs = []
    for doc in (SWEEP, REUSE):
        path = root / f"{doc['name']}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        out = gatesweep(
            "run", str(path), "--runs-dir", str(root / "runs"), "--tracking-uri", uri, "--address", shared_ray, cwd=root, timeout=900
        )
        logs.append(out.stdout + out.stderr)
        expected = 1 if doc is SWEEP else 0  # the diverging cell fails the first sweep
        assert out.returncode == expected, out.stdout + out.stderr
    assert "4 finished, 1 failed" in logs[0], logs[0]
    assert "4 already finished, 0 to run" in logs[1], logs[1]
    return Store(root, uri, db, "\n".join(logs))
