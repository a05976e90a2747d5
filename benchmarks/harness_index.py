"""What finding a harness task's definition costs: lm-evaluation-harness's task manager over its
whole catalogue (every YAML under `lm_eval/tasks/`, what `TaskManager()` reads) against the one
gatesweep builds (`harness.task_manager`: only the folders of the tasks asked for). Each is built
in a fresh interpreter (the harness caches YAML it has read), alternating, CPU seconds side by side.

    python benchmarks/harness_index.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))

from common import result

BUILD = {
    "whole catalogue": "from lm_eval.tasks import TaskManager; TaskManager()",
    "the tasks' folders": "from orchestrator.evals.harness import task_manager; from orchestrator.evals.harness_data import task_names; task_manager(task_names())",
}
TIMED = "import time, lm_eval.tasks, orchestrator.evals.harness; t = time.process_time(); {}; print(time.process_time() - t)"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    times: dict[str, list[float]] = {k: [] for k in BUILD}
    for _ in range(args.rounds):
        for name, code in BUILD.items():
            out = subprocess.run([sys.executable, "-c", TIMED.format(code)], capture_output=True, text=True, check=True)
            times[name].append(float(out.stdout.strip().splitlines()[-1]))
    whole, ours = (statistics.median(times[k]) for k in BUILD)
    for name, values in times.items():
        print(
            f"{name:>20}: median {statistics.median(values):.3f} CPU-s over {len(values)} builds ({', '.join(f'{v:.3f}' for v in values)})"
        )
    result(
        "harness task index, every task gatesweep knows",
        ours,
        "< 0.5 s",
        ours < 0.5,
        "CPU-s",
        f"whole catalogue {whole:.2f} CPU-s, {whole / ours:.0f}x",
    )


if __name__ == "__main__":
    main()
