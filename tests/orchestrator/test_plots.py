"""The plots room (`orchestrator.plots`) draws a trial's own plots (orchestrator.trial logs them) and a
sweep's; the report's own figures (`dashboards.figures`) share its style."""

from __future__ import annotations

import torch

from dashboards import figures
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
        figures.LadderArm("none", [(1e11, 2.5), (1e12, 2.2), (1e13, 2.0)], (1.6, 40.0, 0.18)),
        figures.LadderArm("G1", [(1.05e11, 2.45), (1.05e12, 2.15)], None),  # no fit, a rung missing
    ]
    for target in (4.7e21, 5e13, math.nan):
        assert figures.ladder_fits(arms, target, tmp_path / "fits.png", "val_loss").stat().st_size > 5000
    series = [("G1", [1e11, 1e12, 1e13], [1.2, 1.4, math.inf], [0.9, 1.1, 0.8], [1.6, math.inf, math.inf])]
    assert figures.ladder_multipliers(series, tmp_path / "m.png").stat().st_size > 5000
    assert figures.ladder_multipliers([], tmp_path / "empty.png").exists()
    panels = [("first_token_attn", [("none", [1e11, 1e12], [0.5, 0.6], [0.1, math.nan]), ("G1", [], [], [])])]
    assert figures.ladder_trends(panels, tmp_path / "t.png").stat().st_size > 5000


def test_labels_with_terminal_escapes_are_drawn_escaped_with_no_glyph_warning(tmp_path, recwarn):
    """An axis value from a shared sweep file with ESC sequences, a bidi override and a newline
    reaches every kind of text a plot has (title, legend, tick labels, panel titles): matplotlib
    has nothing to warn about (its `Glyph 27 (ESC) missing` reached the console raw), and the
    figure carries the escapes that the console and report.md show."""
    import warnings

    from orchestrator.core.printable import terminal

    bad = "sep\x1b[2J\x1b]0;pwned\x07\u202eG1"
    warnings.simplefilter("always")
    made = [
        plots.loss_curves([plots.Curve(bad, 0, [1, 2, 3], [3.0, 2.0, 1.0], [(2, 2.0)])], tmp_path / "a.png", f"loss {bad}"),
        plots.first_token_layers([(bad, [0.3, 0.2])], 0.1, tmp_path / "b.png", bad),
        plots.gate_histograms([(bad, [[1, 2, 3], [3, 2, 1]])], tmp_path / "c.png", bad),
        figures.metric_vs_axis(bad, [bad, "plain"], [figures.AxisPanel(bad, [(0, 1.0), (1, 2.0)], [1.0, 2.0])], tmp_path / "d.png"),
        figures.interaction_plot(
            bad,
            [bad, "x"],
            [figures.InteractionPanel(bad, [figures.DeltaSeries(bad, [0.1, -0.2], [(0.0, 0.2), None], [True, False])])],
            tmp_path / "e.png",
        ),
        plots.attention_pair((bad, [[1.0, 0.0], [0.5, 0.5]]), ("G1", [[1.0, 0.0], [0.9, 0.1]]), tmp_path / "f.png", bad),
    ]
    glyphs = [str(w.message) for w in recwarn if "Glyph" in str(w.message) or "missing from font" in str(w.message)]
    assert glyphs == [], glyphs
    for path in made:
        assert path.read_bytes()[:4] == PNG
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.set_title(bad)
    ax.set_xticks([0, 1], [bad, "ok"])
    plots.make_printable(fig)
    fmt = ax.xaxis.get_major_formatter()
    shown = [ax.get_title(), fmt(0, 0)]
    plt.close(fig)
    assert shown[0] == terminal(bad) and shown[1] == terminal(bad) and "\x1b" not in "".join(shown)
