"""Run every benchmark and print one table of figures against the goals.

Each script runs in its own process (clean imports, no shared caches); each prints `RESULT {...}`
lines that are collected here. Ratios are measured side by side inside each script.

    python benchmarks/run_all.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = [
    ("gate_overhead.py", ["--rounds", "9"], ["--rounds", "3"]),
    ("trainer_overhead.py", ["--rounds", "3"], ["--rounds", "1", "--steps", "15"]),
    ("sweep_overhead.py", [], ["--trials", "4", "--steps", "150"]),
    ("eval_cost.py", [], []),
    ("harness_cost.py", [], ["--docs", "5", "--steps", "10"]),
    ("harness_index.py", [], ["--rounds", "1"]),
    ("new_store.py", [], ["--rounds", "1"]),
    ("eval_vs_hflm.py", [], ["--steps", "30", "--docs", "8", "--gen-docs", "4", "--before-docs", "1"]),
    ("plan_scale.py", [], []),
    ("report_scale.py", [], []),
    ("data_pipeline.py", [], ["--large-mb", "200", "--bpe-mb", "10", "--rounds", "1"]),
    ("moe_grouped.py", [], ["--rounds", "2"]),
    ("compile_speed.py", [], ["--rounds", "2"]),
    ("bf16_cpu.py", [], ["--rounds", "2", "--steps-per-round", "2"]),
    ("gpu_mfu.py", [], []),
]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer rounds (noisier)")
    p.add_argument("--only", help="comma-separated script names")
    args = p.parse_args()
    rows = []
    for script, full, quick in SCRIPTS:
        if args.only and script not in args.only.split(","):
            continue
        path = os.path.join(HERE, script)
        if not os.path.exists(path):
            rows.append({"name": script, "value": "-", "goal": "-", "ok": None, "note": "script missing"})
            continue
        t0 = time.perf_counter()
        print(f"== {script}", flush=True)
        out = subprocess.run([sys.executable, path, *(quick if args.quick else full)], capture_output=True, text=True)
        sys.stdout.write("".join(line + "\n" for line in out.stdout.splitlines() if not line.startswith("RESULT ")))
        found = [json.loads(line[7:]) for line in out.stdout.splitlines() if line.startswith("RESULT ")]
        if out.returncode != 0 and not found:
            rows.append(
                {"name": script, "value": "-", "goal": "-", "ok": False, "note": (out.stderr.strip().splitlines() or ["failed"])[-1][:90]}
            )
        rows.extend(found)
        print(f"   ({time.perf_counter() - t0:.0f} s)", flush=True)
    print()
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        mark = {True: "ok", False: "MISSED", None: "n/a"}[r["ok"]]
        value = f"{r['value']} {r.get('unit', '')}".strip()
        print(f"{r['name']:<{width}}  {value:>12}  goal {r['goal']:<18} {mark:<6} {r.get('note', '')}")


if __name__ == "__main__":
    main()
