"""The trial's files, written when it ends and logged as MLflow artifacts: config.yaml (the
resolved config), deepspeed.json, spikes.json (rules and events), probes.json (the data behind
the plots), the plots (loss curve with spikes, first-token attention per layer, an attention
map, gate-score histogram), and RUN_DIR/model.pt (never half-written; logged as `model/model.pt`;
it records the MLflow run it was trained under, `run_id`, which `gatesweep eval`, `export` and
`probe` check against the run they would log into). Keeps the loss history
the curve is drawn from, in every checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from orchestrator import storage
from orchestrator.evals.heldout import probes_artifact
from orchestrator.storage import Location
from orchestrator.storage.retry import retried
from orchestrator.tracking.outcomes import TrialFailed
from orchestrator.trial import plots
from orchestrator.trial.callbacks.base import Callback


class Artifacts(Callback):
    """Main process only. `spikes` is the SpikeDetector whose events are drawn and saved;
    `tracker` the MLflow callback that logs the files."""

    state_key = "history"

    def __init__(self, cfg, built, spikes, run_dir: Path, tracker, remote: Location | None = None):
        self.remote = remote
        """The trial's folder on an object store (a Location): artifacts/ and model.pt are uploaded there."""
        self.cfg, self.resolved = cfg, cfg.replace(model=built.model_cfg)
        self.ds_json, self.model, self.spikes, self.run_dir, self.tracker = built.ds_json, built.model, spikes, run_dir, tracker
        self.history: list[tuple[int, float]] = []
        self.last = None

    def on_step(self, step: int, loss: float, grad_norm: float | None) -> None:
        self.history.append((step, loss))

    def on_eval(self, step: int, result) -> None:
        self.last = result

    def state_dict(self) -> list:
        return self.history

    def load_state_dict(self, state) -> None:
        self.history = [tuple(x) for x in state]

    def on_end(self, step: int, metrics: dict) -> None:
        try:
            self.write()
        except OSError as err:
            raise TrialFailed(
                f"artifacts could not be written to {self.run_dir}: {err} (training finished and its metrics are logged)", kind="disk"
            ) from None
        if self.remote is not None:
            self.upload()

    def upload(self) -> None:
        """artifacts/ and model.pt to the remote folder, model.pt last; a store still down after the
        retries is a warning (the run's MLflow artifacts hold the same files)."""
        try:
            retried(lambda: self.remote.child("artifacts").upload(self.run_dir / "artifacts"), f"uploading to {self.remote}")
            retried(lambda: self.remote.child("model.pt").upload(self.run_dir / "model.pt"), f"uploading to {self.remote}")
        except OSError as err:
            self.tracker.logger._warn(f"artifacts not uploaded to {self.remote} ({str(err).strip()[:200]}); they are in the MLflow run")

    def write(self) -> None:
        import yaml

        out = self.run_dir / "artifacts"
        out.mkdir(parents=True, exist_ok=True)
        last = self.last
        (out / "config.yaml").write_text(yaml.safe_dump(self.resolved.to_dict(), sort_keys=False))
        (out / "deepspeed.json").write_text(json.dumps(self.ds_json, indent=2))
        (out / "spikes.json").write_text(json.dumps({"rules": self.cfg.train.spikes.to_dict(), "events": self.spikes.events}, indent=2))
        (out / "probes.json").write_text(json.dumps(probes_artifact(last)))
        self.save_model()
        label = self.cfg.model.gate.label
        steps, losses = zip(*self.history) if self.history else ((), ())
        plots.loss_curve(list(steps), list(losses), self.spikes.events, out / "loss_curve.png", f"training loss ({label})")
        plots.first_token_per_layer(
            last.first_token_per_layer,
            last.metrics["first_token_attn_uniform"],
            out / "first_token_attn.png",
            f"first-token attention ({label})",
        )
        if last.attn_maps:
            plots.attention_map(last.attn_maps[-1], out / "attention_map.png", f"last layer, most sink-like head ({label})")
        if last.gate_hist:
            plots.gate_histogram(last.gate_hist, out / "gate_hist.png", f"gate scores ({label})", last.gate_high)
        for path in sorted(out.iterdir()):
            self.tracker.log_artifact(path)
        self.tracker.log_weights(self.run_dir / "model.pt")

    def save_model(self) -> None:
        state = {k: v.detach().cpu() for k, v in self.model.state_dict().items()}
        # the run id travels with the weights: a consumer refuses weights of another run than the one it logs into
        record = {"model": state, "config": self.resolved.to_dict(), "run_id": self.tracker.run_id}
        storage.write_stream(self.run_dir / "model.pt", lambda fh: torch.save(record, fh))  # never a half-written model.pt
