"""The one plots module draws a trial's own plots (orchestrator.trial logs them) and a sweep's."""

from __future__ import annotations

import torch

from orchestrator import plots

PNG = b"\x89PNG"


def test_trial_plots_from_a_trial_s_own_data(tmp_path):
    steps = list(range(1, 21))
    losses = [4.0 / s for s in steps]
    events = [{"step": 5, "loss": 1.2, "rule": "sigma"}, {"step": 7, "loss": 0.9, "rule": "grad_sigma"}]
    made = [
        plots.loss_curve(steps, losses, events, tmp_path / "loss_curve.png", "training loss (G1)"),
        plots.loss_curve([], [], [], tmp_path / "empty_loss.png"),
        plots.first_token_per_layer([0.4, 0.1], 0.059, tmp_path / "first_token_attn.png", "first-token attention (G1)"),
        plots.attention_map(torch.softmax(torch.randn(8, 8), -1), tmp_path / "attention_map.png", "last layer"),
        plots.gate_histogram([[1, 2, 3, 0, 5], [5, 4, 3, 2, 1]], tmp_path / "gate_hist.png", "gate scores (G1)"),
        plots.gate_histogram([[0, 0, 0], [0, 0, 0]], tmp_path / "no_scores.png", "a NaN model's gate: nothing counted"),
        plots.attention_pair(("none", [[1.0, 0.0], [0.5, 0.5]]), ("G1", [[1.0, 0.0], [0.9, 0.1]]), tmp_path / "pair.png"),
    ]
    for path in made:
        assert path.read_bytes()[:4] == PNG, path


def test_the_ladder_plots_draw_fits_bands_and_trends_with_infinities_and_gaps(tmp_path):
    import math

    arms = [
        plots.LadderArm("none", [(1e11, 2.5), (1e12, 2.2), (1e13, 2.0)], (1.6, 40.0, 0.18)),
        plots.LadderArm("G1", [(1.05e11, 2.45), (1.05e12, 2.15)], None),  # no fit, a rung missing
    ]
    for target in (4.7e21, 5e13, math.nan):
        assert plots.ladder_fits(arms, target, tmp_path / "fits.png", "val_loss").stat().st_size > 5000
    series = [("G1", [1e11, 1e12, 1e13], [1.2, 1.4, math.inf], [0.9, 1.1, 0.8], [1.6, math.inf, math.inf])]
    assert plots.ladder_multipliers(series, tmp_path / "m.png").stat().st_size > 5000
    assert plots.ladder_multipliers([], tmp_path / "empty.png").exists()
    panels = [("first_token_attn", [("none", [1e11, 1e12], [0.5, 0.6], [0.1, math.nan]), ("G1", [], [], [])])]
    assert plots.ladder_trends(panels, tmp_path / "t.png").stat().st_size > 5000
