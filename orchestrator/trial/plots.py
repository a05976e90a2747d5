"""A trial's PNG plots, logged as its artifacts: drawn by `orchestrator.plots`, the code that draws a sweep's too."""

from orchestrator.plots import attention_map, first_token_per_layer, gate_histogram, loss_curve

__all__ = ["attention_map", "first_token_per_layer", "gate_histogram", "loss_curve"]
