"""What a new SQLite tracking store costs: MLflow making it (its schema migrations run one by
one) against gatesweep's copy of the empty store it keeps in the cache (`tracking.store.client`).
Each store is made in a fresh interpreter with MLflow already imported, alternating, CPU seconds
side by side; the cache's own empty store is made once, before the first round.

    python benchmarks/new_store.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))

from common import result

MAKE = {
    "MLflow's own": "from mlflow.tracking import MlflowClient; MlflowClient(tracking_uri=URI).search_experiments(max_results=1)",
    "a copy": "from orchestrator.tracking import client; client(URI)",
}
TIMED = (
    "import time, logging, mlflow.tracking, mlflow.store.tracking.sqlalchemy_store, orchestrator.tracking; "
    "logging.disable(logging.INFO); URI = {uri!r}; t = time.process_time(); {code}; print(time.process_time() - t)"
)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    times: dict[str, list[float]] = {k: [] for k in MAKE}
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "GATESWEEP_CACHE": os.path.join(tmp, "cache"), "MLFLOW_DISABLE_TELEMETRY": "true"}
        warm = TIMED.format(uri=f"sqlite:///{tmp}/warm.db", code=MAKE["a copy"])
        subprocess.run([sys.executable, "-c", warm], capture_output=True, text=True, check=True, env=env)
        for r in range(args.rounds):
            for i, (name, code) in enumerate(MAKE.items()):
                uri = f"sqlite:///{tmp}/r{r}-{i}.db"
                out = subprocess.run(
                    [sys.executable, "-c", TIMED.format(uri=uri, code=code)], capture_output=True, text=True, check=True, env=env
                )
                times[name].append(float(out.stdout.strip().splitlines()[-1]))
    own, copy = (statistics.median(times[k]) for k in MAKE)
    for name, values in times.items():
        print(
            f"{name:>13}: median {statistics.median(values):.3f} CPU-s over {len(values)} stores ({', '.join(f'{v:.3f}' for v in values)})"
        )
    result("a new SQLite tracking store", copy, "< 0.5 s", copy < 0.5, "CPU-s", f"MLflow's own {own:.2f} CPU-s, {own / copy:.1f}x")


if __name__ == "__main__":
    main()
