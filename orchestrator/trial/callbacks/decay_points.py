"""The points a WSD-S schedule reads (`train.schedule: wsd_s`): at the bottom of every decay but
the last, the held-out metrics with the tokens and training FLOPs seen so far, logged with the
final metrics as `wsd/<i>/<name>` (i counting the decays from 0; the last decay's point is the
trial's own final metrics). A scaling ladder reads them as several (N, D) points per run
(`orchestrator.ladder`). They travel in every checkpoint, so a resumed trial keeps them."""

from __future__ import annotations

from gatedmodels.costs import model_costs
from orchestrator.trial.callbacks.base import Callback, TrainerView

PREFIX = "wsd/"
READ = ("val_loss", "val_bpb")
"""The held-out metrics a point keeps (with `tokens` and `train_flops`)."""


def point_key(i: int, name: str) -> str:
    return f"{PREFIX}{i}/{name}"


class DecayPoints(Callback):
    state_key = "decay_points"

    def __init__(self, train, model_cfg, seq_len: int):
        bottoms = train.decay_steps()[:-1]
        self.index = {step: i for i, step in enumerate(bottoms)}
        self.per_token = model_costs(model_cfg).train_flops(seq_len)
        self.points: dict[int, dict[str, float]] = {}

    def after_resume(self, trainer: TrainerView) -> None:
        self.trainer = trainer

    def on_eval(self, step: int, result) -> None:
        i = self.index.get(step)
        if i is None:
            return
        tokens = float(self.trainer.tokens_seen)
        point = {k: float(result.metrics[k]) for k in READ if k in result.metrics}
        point.update(tokens=tokens, train_flops=self.per_token * tokens)
        self.points[i] = point

    def collect_final(self, metrics: dict) -> None:
        for i, point in sorted(self.points.items()):
            for name, value in point.items():
                metrics[point_key(i, name)] = value

    def state_dict(self) -> dict:
        return {str(i): p for i, p in self.points.items()}

    def load_state_dict(self, state) -> None:
        self.points = {int(i): dict(p) for i, p in (state or {}).items()}
