"""How true `gatesweep plan --measure` is: plan a sweep, run it at once on this machine, and put
each named part of the estimate beside the phase it stands for, with the error of the total and
the load average before and after (the machine is shared: say it).

Phases, from the run's console lines stamped as they come: start (command to the first trial's
start), trials (first start to the last end), end (the last end to the command's exit: Ray
stopped, the report built, the tables printed). The error is (estimate - measured) / measured.

    python benchmarks/plan_accuracy.py sweeps/hello.yaml [--set K=V] [--grid K=V1,V2]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def stamped(cmd: list[str], cwd: Path) -> list[tuple[float, str]]:
    """Run `cmd`; every line of its output with the seconds since it started."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    lines = [(time.monotonic() - t0, line.rstrip("\n")) for line in proc.stdout or []]
    proc.wait()
    return [*lines, (time.monotonic() - t0, f"EXIT {proc.returncode}")]


def phases(lines: list[tuple[float, str]]) -> dict[str, float]:
    starts = [t for t, ln in lines if re.search(r"\] start ", ln)]
    ends = [t for t, ln in lines if re.search(r"\] (done|failed|stopped) ", ln)]
    total = lines[-1][0]
    if not starts or not ends:
        return {"total": total}
    return {"start": starts[0], "trials": ends[-1] - starts[0], "end": total - ends[-1], "total": total}


def estimate(plan_out: str) -> dict[str, float]:
    """The parts plan printed, in seconds."""

    def secs(text: str) -> float:
        value, unit = text.split()
        return float(value) * {"s": 1, "min": 60, "h": 3600}[unit]

    out = {}
    for line in plan_out.splitlines():
        m = re.match(r"^  (start|trial start-up|training|evaluations|waiting|report)\s+([\d.]+ (?:s|min|h))\s", line)
        if m:
            out[m.group(1)] = secs(m.group(2))
    out["total"] = sum(out.values())
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file")
    args, extra = p.parse_known_args()
    gs = [sys.executable, "-m", "orchestrator.cli"]
    with tempfile.TemporaryDirectory(prefix="plan-accuracy-") as tmp:
        root = Path(tmp)
        uri = f"sqlite:///{root / 'mlflow.db'}"
        load0 = os.getloadavg()[0]
        plan = subprocess.run(
            [*gs, "plan", args.file, "--measure", "--tracking-uri", uri, *extra], cwd=root, capture_output=True, text=True
        )
        est = estimate(plan.stdout)
        run = stamped([*gs, "run", args.file, "--tracking-uri", uri, "--runs-dir", str(root / "runs"), *extra], root)
        load1 = os.getloadavg()[0]
    got = phases(run)
    print(f"{args.file} {' '.join(extra)}: load average {load0:.1f} before the plan, {load1:.1f} after the run")
    pairs = [
        ("start", est.get("start", 0.0), got.get("start")),
        ("trials", sum(est.get(k, 0.0) for k in ("trial start-up", "training", "evaluations", "waiting")), got.get("trials")),
        ("end", est.get("report", 0.0), got.get("end")),
        ("total", est["total"], got["total"]),
    ]
    for name, e, m in pairs:
        err = f"{(e - m) / m:+.0%}" if m else "-"
        print(f"  {name:<7} estimated {e:7.1f} s  measured {m if m is not None else float('nan'):7.1f} s  error {err}")


if __name__ == "__main__":
    main()
