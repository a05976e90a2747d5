"""The calibration figures docs/ladder.md states (`benchmarks/ladder_calibration.py`, 200 synthetic
ladders per setting, stored in docs/results/ladder-calibration.json) stay true of the code: a fast
subset of the same settings, rerun here, agrees with them within their binomial error, and meets
the goals where the stored figures say it does."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from orchestrator.ladder.synthetic import Setting, calibrate

STORED = Path(__file__).resolve().parents[3] / "docs" / "results" / "ladder-calibration.json"
LADDERS = 80


def agrees(fast: float, stored: float, n_fast: int, n_stored: int) -> bool:
    """Within 3.5 standard errors of the difference of two binomial shares."""
    p = min(max((fast * n_fast + stored * n_stored) / (n_fast + n_stored), 0.02), 0.98)
    return abs(fast - stored) <= 3.5 * math.sqrt(p * (1 - p) * (1 / n_fast + 1 / n_stored))


@pytest.mark.slow
@pytest.mark.parametrize(
    "key, setting", [("4x3-m1", Setting(rungs=4, seeds=3, multiplier=1.0)), ("4x3-m1.5", Setting(rungs=4, seeds=3, multiplier=1.5))]
)
def test_a_fast_subset_agrees_with_the_documented_calibration(key, setting):
    doc = json.loads(STORED.read_text())
    stored = doc["settings"][key]
    c = calibrate(setting, LADDERS, replicates=doc["replicates"], seed=12345)
    assert c.failures == 0
    for name, cov in c.coverage.items():
        assert agrees(cov, stored["coverage"][name], LADDERS, doc["ladders"]), (name, cov, stored["coverage"][name])
    if setting.multiplier == 1.0:
        assert agrees(c.false_verdicts, stored["false_verdicts"], LADDERS, doc["ladders"])
        assert c.false_verdicts <= 0.10  # the goal is 5% family-wise; 80 ladders can show up to ~10% by chance
    else:
        assert agrees(c.detected["joint"], stored["detected"]["joint"], LADDERS, doc["ladders"])
