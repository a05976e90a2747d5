"""The ladder's calibration on synthetic ladders with a known answer (`orchestrator.ladder.synthetic`):
for each setting — 4 and 6 rungs, 3 and 5 seeds, a true multiplier of 1, 1.2 and 1.5; noise per rung
as the shipped CPU ladder measured it (2.8% at the smallest rung to 0.45% at the largest), half of
it a seed effect the arms share, and a ±2% lack-of-fit bump both arms share at one rung — it counts
how often the 95% intervals cover the true multiplier (per rung, joint, at the target), how often a
ladder whose variant is worth exactly 1x says "helps" or "hurts" anywhere (family-wise), and how
often a real gain is detected. Several points per run (WSD-S) are the last settings.

    .venv/bin/python benchmarks/ladder_calibration.py                  # 500 ladders per setting (~2-3 h on 2 cores; the docs' 200 took ~70 min)
    .venv/bin/python benchmarks/ladder_calibration.py --ladders 40     # a quick look
    .venv/bin/python benchmarks/ladder_calibration.py --json docs/results/ladder-calibration.json

docs/ladder.md's calibration table comes from the JSON this writes; tests/orchestrator/ladder/
test_calibration.py reruns a fast subset and checks it agrees with the stored figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.ladder.synthetic import Setting, calibrate

REPLICATES = 500


def settings() -> list[Setting]:
    grid = [Setting(rungs=r, seeds=n, multiplier=m) for r in (4, 6) for n in (3, 5) for m in (1.0, 1.2, 1.5)]
    nd = [Setting(rungs=r, seeds=3, multiplier=m, fractions=(0.25, 0.5, 1.0)) for r in (4, 6) for m in (1.0, 1.5)]
    return grid + nd


def key(s: Setting) -> str:
    return f"{s.rungs}x{s.seeds}-m{s.multiplier:g}" + ("-wsd" if s.fractions else "")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ladders", type=int, default=500)
    p.add_argument("--replicates", type=int, default=REPLICATES)
    p.add_argument("--json", type=Path, help="write the figures here")
    p.add_argument("--only", help="run the settings whose key contains this text (e.g. 4x3)")
    p.add_argument("--markdown", type=Path, help="print the table of a stored JSON (docs/ladder.md's) and run nothing")
    args = p.parse_args(argv)
    if args.markdown:
        print(markdown(json.loads(args.markdown.read_text())))
        return 0
    out: dict = {"ladders": args.ladders, "replicates": args.replicates, "settings": {}}
    for s in settings():
        if args.only and args.only not in key(s):
            continue
        t = time.perf_counter()
        c = calibrate(s, args.ladders, replicates=args.replicates)
        row = {
            "label": s.label(),
            "coverage": c.coverage,
            "false_verdicts": c.false_verdicts if s.multiplier == 1.0 else None,
            "detected": c.detected,
            "rollout_flags": c.rollout_flags,
            "failures": c.failures,
            "seconds": round(time.perf_counter() - t, 1),
        }
        out["settings"][key(s)] = row
        cov = " ".join(f"{k} {v:.3f}" for k, v in c.coverage.items())
        extra = (
            f"false verdicts {c.false_verdicts:.3f}"
            if s.multiplier == 1.0
            else "detected " + " ".join(f"{k} {v:.2f}" for k, v in c.detected.items())
        )
        print(
            f"{key(s):16s} coverage: {cov} | {extra} | rollout flags {c.rollout_flags:.3f} | failures {c.failures} | {row['seconds']} s",
            flush=True,
        )
        if args.json:
            args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


def markdown(doc: dict) -> str:
    """The calibration table: per setting, the coverage of the per-rung intervals (lowest and
    highest over the rungs), of the joint and the target multiplier, false verdicts (m = 1) or the
    joint verdict's power (m > 1), the rollout flags."""
    lines = [
        "| setting | per-rung coverage (min–max) | joint | target | false verdicts (m = 1) / power (m > 1) | rollout flagged |",
        "|---|---|---|---|---|---|",
    ]
    for row in doc["settings"].values():
        cov = row["coverage"]
        rungs = [v for k, v in cov.items() if k.startswith("r")]
        verdict = f"{row['false_verdicts']:.1%}" if row["false_verdicts"] is not None else f"power {row['detected']['joint']:.0%}"
        lines.append(
            f"| {row['label']} | {min(rungs):.1%}–{max(rungs):.1%} | {cov['joint']:.1%} | {cov['target']:.1%} | {verdict} | {row['rollout_flags']:.1%} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
