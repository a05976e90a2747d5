"""The shipped science sweeps run end to end at reduced steps (`--smoke`), and their reports have
the columns and figures their README tables are read from."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

TABLE4_VARIANTS = (
    "none",
    "G1-elementwise",
    "G1-headwise",
    "G1-elementwise-shared",
    "G2-elementwise",
    "G1-elementwise-const",
    "G1-elementwise-ns-sigmoid",
)
REMEDIES = ("none", "G1-elementwise", "softmax", "softmax1", "learned_sink", "softpick", "sigmoid", "key_bias")

SHIPPED = {
    # sweep file: (sweep name, trials, cells of the report's configuration rows, its README table's
    # columns (the report's --metrics), figures)
    "paper_table4_cpu.yaml": (
        "paper-table4-cpu",
        21,
        TABLE4_VARIANTS,
        ("first_token_attn", "sink_ratio", "gate_score_mean", "max_activation", "value_norm_bos_ratio", "bbc/trigger_loss", "val_loss"),
        {"first_token_attn_per_layer.png", "gate_histograms.png", "attention_maps.png"},
    ),
    "sink_remedies_cpu.yaml": (
        "sink-remedies-cpu",
        48,
        REMEDIES,
        ("first_token_attn", "sink_ratio", "sink_slot_mass", "max_activation", "val_loss", "val_bpb", "tokens_per_s"),
        {"first_token_attn_per_layer.png"},
    ),
    "gates_2026_cpu.yaml": (
        "gates-2026-cpu",
        64,
        ("none", "G1-elementwise", "G1-headwise", "G1-elementwise-softplus", "G1-headwise-softplus", "G1-headwise-2sigmoid", "mla"),
        ("first_token_attn", "sink_ratio", "gate_score_mean", "gate_frac_below_0.1", "gate_frac_above_1", "max_activation", "val_bpb"),
        {"first_token_attn_per_layer.png", "gate_histograms.png", "layer_heatmaps.png"},
    ),
    "paper_text_cpu.yaml": (
        "paper-text-cpu",
        9,
        ("none", "G1-elementwise", "352", "395"),
        ("val_ppl", "max_activation", "bpb/shakespeare", "bpb/kjv", "bpb/wikipedia"),
        {"loss_curves.png"},
    ),
    "paper_length_cpu.yaml": (
        "paper-length-cpu",
        10,
        ("none", "G1-elementwise"),
        ("length_copy/none/512", "length_copy/yarn/512", "length_copy/base/512", "length_excess/yarn/1024", "length_loss/base/256"),
        {"first_token_attn_per_layer.png", "loss_curves.png"},
    ),
    "ladder_cpu.yaml": (
        "ladder-cpu",
        45,
        ("none", "G1-elementwise", "d32-l2", "d80-l2", "197"),
        ("val_loss", "val_bpb", "first_token_attn", "train_flops"),
        {"ladder_fits.png", "ladder_multipliers.png", "ladder_trends.png"},
    ),
    "paper_lr_stability_cpu.yaml": (
        "paper-lr-stability-cpu",
        24,
        ("none", "G1-elementwise", "0.003", "0.1"),
        ("val_ppl", "loss_spikes", "max_activation"),
        {"loss_curves.png"},
    ),
}


def cli(*args: str, cwd: Path, timeout: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("file", sorted(SHIPPED))
def test_shipped_sweep_smoke_and_report(file, tmp_path):
    name, trials, configurations, columns, figures = SHIPPED[file]
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run = cli(
        "run",
        str(ROOT / "sweeps" / file),
        "--smoke",
        "--tracking-uri",
        uri,
        "--runs-dir",
        str(tmp_path / "runs"),
        cwd=tmp_path,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert f"{name}-smoke: {trials} finished" in run.stdout
    out = tmp_path / "report"
    report = cli(
        "report",
        f"{name}-smoke",
        "--format",
        "md",
        "--metrics",
        ",".join(columns),
        "--tracking-uri",
        uri,
        "--out",
        str(out),
        cwd=tmp_path,
        timeout=300,
    )
    assert report.returncode == 0, report.stderr
    md = report.stdout
    for configuration in configurations:
        assert f"| {configuration} " in md, configuration
    for column in columns:
        assert column in md, column
    assert figures <= {p.name for p in out.glob("*.png")}
    if "ladder" in file:  # the ladder's section, with a fit per arm (smoke losses are what they are)
        assert "## Scaling ladder" in md and "effective-compute multiplier" in md
        import json

        doc = json.loads((out / "report.json").read_text())
        assert [r["rung"] for r in doc["ladder"]["rungs"]] == ["d16-l2", "d32-l2", "d48-l2", "d64-l2", "d80-l2"]
