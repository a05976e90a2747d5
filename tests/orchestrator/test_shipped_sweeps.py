"""The shipped Table 4 reproduction runs end to end at reduced steps (`--smoke`), and its report has
the paper's columns and figures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_paper_table4_sweep_smoke_and_report(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "run",
            str(ROOT / "sweeps" / "paper_table4_cpu.yaml"),
            "--smoke",
            "--tracking-uri",
            uri,
            "--runs-dir",
            str(tmp_path / "runs"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "paper-table4-cpu-smoke: 21 finished" in run.stdout
    report = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "report",
            "paper-table4-cpu-smoke",
            "--format",
            "md",
            "--tracking-uri",
            uri,
            "--out",
            str(tmp_path / "report"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert report.returncode == 0, report.stderr
    md = report.stdout
    for variant in (
        "none",
        "G1-elementwise",
        "G1-headwise",
        "G1-elementwise-shared",
        "G2-elementwise",
        "G1-elementwise-const",
        "G1-elementwise-ns-sigmoid",
    ):
        assert f"| {variant} " in md, variant
    for column in (
        "first_token_attn",
        "sink_ratio",
        "gate_score_mean",
        "max_activation",
        "value_norm_bos_ratio",
        "bbc/trigger_loss",
        "val_loss",
    ):
        assert column in md, column
    figures = {p.name for p in (tmp_path / "report").glob("*.png")}
    assert {"first_token_attn_per_layer.png", "gate_histograms.png", "attention_maps.png"} <= figures
