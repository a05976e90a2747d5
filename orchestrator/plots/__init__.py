"""The plots every room draws alike: one figure style, and what a sweep's report and one trial both draw.

- `figure`: PNG via matplotlib's Agg backend, every text made printable, the DPI and colours;
- `draw`: loss curves, first-token attention, attention maps, gate histograms.

Below the trial, the interop probe and the dashboards, which all draw with it; the report's own
figures (metric against axis, interactions, the ladder's) live in `dashboards.figures`."""

from .draw import (
    LOW_GATE,
    Curve,
    attention_map,
    attention_maps,
    attention_pair,
    first_token_layers,
    first_token_per_layer,
    gate_histogram,
    gate_histograms,
    loss_curve,
    loss_curves,
)
from .figure import DPI, color, make_printable, plt, save

__all__ = [
    "DPI",
    "LOW_GATE",
    "Curve",
    "attention_map",
    "attention_maps",
    "attention_pair",
    "color",
    "first_token_layers",
    "first_token_per_layer",
    "gate_histogram",
    "gate_histograms",
    "loss_curve",
    "loss_curves",
    "make_printable",
    "plt",
    "save",
]
