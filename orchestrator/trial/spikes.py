"""Loss-spike detection with two explicit rules (REFERENCE §3).

- `sigma` (OLMo-core's SpikeScore): loss > mean + k * std of the previous `window` losses;
  also applied to the gradient norm and counted separately.
- `ema`: loss > EMA(beta) of the earlier losses + delta (the paper plots a 0.9-EMA curve).

Both rules run on every step after `warmup`; each spike is kept with its step, loss, rule and the
batch position, for spike forensics. The state survives checkpoints (`state_dict`).
"""

from __future__ import annotations

import math
from collections import deque

from orchestrator.spec.train import SpikeConfig


class SpikeDetector:
    def __init__(self, cfg: SpikeConfig):
        self.cfg = cfg
        self.losses: deque[float] = deque(maxlen=cfg.window)
        self.grad_norms: deque[float] = deque(maxlen=cfg.window)
        self.ema: float | None = None
        self.events: list[dict] = []

    @staticmethod
    def _above(history: deque, value: float, k: float) -> tuple[bool, float]:
        if len(history) < history.maxlen:
            return False, math.nan
        n = len(history)
        mean = sum(history) / n
        std = math.sqrt(sum((x - mean) ** 2 for x in history) / (n - 1))
        threshold = mean + k * std
        return value > threshold, threshold

    def update(self, step: int, loss: float, grad_norm: float | None = None, batch: dict | None = None) -> list[str]:
        """Feed one step; return the rules that fired."""
        fired = []
        if step > self.cfg.warmup:
            hit, threshold = self._above(self.losses, loss, self.cfg.k)
            if hit:
                fired.append("sigma")
                self.events.append({"step": step, "rule": "sigma", "loss": loss, "threshold": threshold, "batch": batch})
            if self.ema is not None and loss > self.ema + self.cfg.delta:
                fired.append("ema")
                self.events.append({"step": step, "rule": "ema", "loss": loss, "threshold": self.ema + self.cfg.delta, "batch": batch})
            if grad_norm is not None and math.isfinite(grad_norm):
                hit, threshold = self._above(self.grad_norms, grad_norm, self.cfg.k)
                if hit:
                    fired.append("grad_sigma")
                    self.events.append(
                        {"step": step, "rule": "grad_sigma", "grad_norm": grad_norm, "loss": loss, "threshold": threshold, "batch": batch}
                    )
        self.losses.append(loss)
        if grad_norm is not None and math.isfinite(grad_norm):
            self.grad_norms.append(grad_norm)
        b = self.cfg.ema_beta
        self.ema = loss if self.ema is None else b * self.ema + (1 - b) * loss
        return fired

    def count(self, rule: str) -> int:
        return sum(1 for e in self.events if e["rule"] == rule)

    def summary(self) -> dict[str, float]:
        return {
            "loss_spikes": self.count(self.cfg.rule),
            "loss_spikes/sigma": self.count("sigma"),
            "loss_spikes/ema": self.count("ema"),
            "grad_norm_spikes": self.count("grad_sigma"),
        }

    def state_dict(self) -> dict:
        return {"losses": list(self.losses), "grad_norms": list(self.grad_norms), "ema": self.ema, "events": list(self.events)}

    def load_state_dict(self, state: dict) -> None:
        self.losses.extend(state["losses"])
        self.grad_norms.extend(state["grad_norms"])
        self.ema = state["ema"]
        self.events = list(state["events"])
