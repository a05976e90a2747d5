"""A trial's PNG plots, logged as its artifacts: drawn by `dashboards.plots`, the one plots module."""

from dashboards.plots import attention_map, first_token_per_layer, gate_histogram, loss_curve

__all__ = ["attention_map", "first_token_per_layer", "gate_histogram", "loss_curve"]
