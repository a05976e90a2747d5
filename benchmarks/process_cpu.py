"""Where a command's CPU goes, by kind of process: runs COMMAND, reads every new process's CPU time
(user + system, /proc/PID/stat) every `--interval` seconds while it runs, and prints the CPU-s of
each kind (a sweep's driver, Ray's trial workers, Ray's own processes, pytest, MLflow servers...)
with how many processes of it were seen.

    python benchmarks/process_cpu.py [--interval 0.5] [--json out.json] -- COMMAND...
    python benchmarks/process_cpu.py -- gatesweep run sweeps/paper_table4_cpu.yaml --smoke

It also prints how busy the machine's CPUs were over the run (every process, not only the
command's): below 100% on a CPU-bound run, that share was waiting (sleeps, a fault the test
holds open, a tail where one pytest worker runs alone), which less work would not shorten.

A profile, not a ratio: it says where to look. Each process is counted up to its last sample, so a
process that lives less than `--interval` is missed and every process's last interval is; Ray's
workers rename themselves (`ray::IDLE`, `ray::ImplicitFunc`), and are grouped by their latest name.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")
KINDS = (  # (kind, pattern of the command line), the first that matches
    ("Ray trial workers", r"^\[?ray::(ImplicitFu|IDLE|_Inner|RayTrainWorker|TrainTrainable)"),
    ("Ray agents and actors", r"^\[?ray::"),
    ("Ray's own processes", r"gcs_server|raylet|ray/_private|ray/autoscaler|ray/dashboard|ray_cli|ray start"),
    ("gatesweep commands", r"orchestrator\.cli|/gatesweep "),
    ("pytest", r"pytest|xdist|sys\.stdin"),
    ("MLflow servers", r"mlflow|gunicorn|uvicorn|huey"),
    ("Chromium", r"chrom"),
    ("PostgreSQL", r"postgres|initdb|pg_ctl"),
    ("S3 server", r"moto"),
)


def command_line(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
        if cmd:
            return cmd
        with open(f"/proc/{pid}/comm") as fh:
            return f"[{fh.read().strip()}]"
    except OSError:
        return ""


def cpu_seconds(pid: str) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK
    except (OSError, IndexError, ValueError):
        return None


def machine_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of all this machine's CPUs so far (/proc/stat's first line; idle and
    iowait count as not busy)."""
    with open("/proc/stat") as fh:
        values = [int(v) for v in fh.readline().split()[1:9]]
    return sum(values) - values[3] - values[4], sum(values)


def kind_of(cmd: str) -> str:
    return next((kind for kind, pattern in KINDS if re.search(pattern, cmd)), "other: " + re.sub(r"\d+", "N", cmd)[:60])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--interval", type=float, default=0.5, help="seconds between samples (default 0.5)")
    ap.add_argument("--json", help="also write {kind: [cpu_s, processes]} here")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = ap.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("no command given (put it after --)")
    before = {p for p in os.listdir("/proc") if p.isdigit()}
    seen: dict[str, tuple[str, float]] = {}  # pid -> (latest command line, CPU-s)
    started, jiffies = time.monotonic(), machine_jiffies()
    proc = subprocess.Popen(command)
    while proc.poll() is None:
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or pid in before:
                continue
            cpu, cmd = cpu_seconds(pid), command_line(pid)
            if cpu is not None and cmd:
                if cmd.startswith("[") and pid in seen:  # exiting: /proc shows its short name only
                    cmd = seen[pid][0]
                seen[pid] = (cmd, cpu)
        time.sleep(args.interval)
    wall = time.monotonic() - started
    busy = [end - start for end, start in zip(machine_jiffies(), jiffies)]
    share = busy[0] / max(busy[1], 1)
    totals: collections.Counter[str] = collections.Counter()
    counts: collections.Counter[str] = collections.Counter()
    for cmd, cpu in seen.values():
        kind = kind_of(cmd)
        totals[kind] += cpu
        counts[kind] += 1
    print(f"exit {proc.returncode}, {wall:.1f} s wall, {sum(totals.values()):.1f} CPU-s seen in {len(seen)} processes", file=sys.stderr)
    print(f"the machine's {os.cpu_count()} CPUs were {share:.0%} busy over it (every process, /proc/stat)", file=sys.stderr)
    for kind, cpu in totals.most_common():
        print(f"{cpu:9.1f} CPU-s {counts[kind]:5d} processes  {kind}", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"machine busy": share, **{k: [round(v, 2), counts[k]] for k, v in totals.items()}}, fh, indent=1)
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
