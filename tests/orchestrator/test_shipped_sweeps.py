"""The shipped science sweeps run end to end at reduced steps (`--smoke`), and their reports have
the columns and figures their README tables are read from.

Every cell of each file is expanded and validated at smoke size (in-process: cheap); the launch
runs every distinct cell but its seed, on two seeds (`--grid train.seed=0,1`): a third seed goes
through the same code as the first two (the report's seed statistics and significance tests need
two), and trials are most of each test's time. The sweeps join one Ray cluster of the session
(`shared_ray`): Ray's own start and stop are other tests' subject."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli.sweepfile import load_and_expand
from orchestrator.spec.overrides import parse_overrides
from tests.support.cli import run_cli

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
    # sweep file: (sweep name, trials of the whole file at smoke size, cells of the report's configuration rows, its README table's
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


SEEDS = "train.seed=0,1"
"""The seeds the test launches (the files have 3 or 5)."""


def cli(*args: str, cwd: Path, timeout: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def without_seed(trial) -> str:
    """A trial's config hash with its seed set to 0: the cell it is but for its seed."""
    cfg = trial.config
    return cfg.replace(train=cfg.train.replace(seed=0)).config_hash()


def two_seeds(path: Path, trials: int) -> int:
    """The trials of `path --smoke --grid train.seed=0,1`, checked to be every distinct cell of
    the whole file (`trials` of them at smoke size, each built and validated) but for its seed."""
    _, whole = load_and_expand(path, smoke=True)
    assert len(whole.trials) == trials
    _, launched = load_and_expand(path, smoke=True, overrides=parse_overrides(grids=[SEEDS]))
    assert {without_seed(t) for t in launched.trials} == {without_seed(t) for t in whole.trials}
    assert {t.config.train.seed for t in launched.trials} == {0, 1}
    return len(launched.trials)


@pytest.mark.parametrize("file", sorted(SHIPPED))
def test_shipped_sweep_smoke_and_report(file, tmp_path, shared_ray, capsys, monkeypatch):
    name, trials, configurations, columns, figures = SHIPPED[file]
    launched = two_seeds(ROOT / "sweeps" / file, trials)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run = cli(
        "run",
        str(ROOT / "sweeps" / file),
        "--smoke",
        "--grid",
        SEEDS,
        "--address",
        shared_ray,
        "--tracking-uri",
        uri,
        "--runs-dir",
        str(tmp_path / "runs"),
        cwd=tmp_path,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert f"{name}-smoke: {launched} finished" in run.stdout
    out = tmp_path / "report"
    monkeypatch.chdir(tmp_path)  # the report in this process (what the command does, not its process)
    code, md, err = run_cli(
        capsys, "report", f"{name}-smoke", "--format", "md", "--metrics", ",".join(columns), "--tracking-uri", uri, "--out", out
    )
    assert code == 0, err
    for configuration in configurations:
        assert f"| {configuration} " in md, configuration
    for column in columns:
        assert column in md, column
    assert figures <= {p.name for p in out.glob("*.png")}
    if "ladder" in file:  # the ladder's section, with a fit per arm (smoke losses are what they are)
        assert "## Scaling ladder" in md and "effective-compute multiplier" in md
        doc = json.loads((out / "report.json").read_text())
        assert [r["rung"] for r in doc["ladder"]["rungs"]] == ["d16-l2", "d32-l2", "d48-l2", "d64-l2", "d80-l2"]
