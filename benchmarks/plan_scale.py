"""Time to expand and validate a 10,000-trial grid (what `gatesweep validate/plan` do before
anything launches). Goal < 1 s.

    python benchmarks/plan_scale.py
"""

from __future__ import annotations

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))

from common import result


def main() -> None:
    from orchestrator.spec.expand import expand
    from orchestrator.spec.sweep import SweepSpec

    spec = SweepSpec.from_dict(
        {
            "name": "scale",
            "base": {"model": {"size": "tiny"}, "data": {"source": "bigram-backcopy"}},
            "grid": {
                "model.gate.position": ["none", "G1", "G2", "G3", "G4"],
                "train.lr": [i * 1e-4 for i in range(1, 51)],
                "train.seed": list(range(40)),
            },
        }
    )
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        e = expand(spec)
        times.append(time.perf_counter() - t0)
    t = statistics.median(times)
    print(f"expand + validate {len(e.trials)} trials: median {t:.3f} s over 5 runs (min {min(times):.3f}, max {max(times):.3f})")
    result("plan of a 10,000-trial grid", round(t, 3), "< 1 s", t < 1, "s")


if __name__ == "__main__":
    main()
