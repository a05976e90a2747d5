"""Fakes shared by the trainer and callback tests: a tiny model behind the part of DeepSpeed's
engine the loop and the checkpoint callback use, deterministic data, a recording callback, and
the MLflow callback's surface for the callbacks that flush or log through it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import torch

from orchestrator.evals.heldout import EvalResult
from orchestrator.spec.trial import TrialConfig
from orchestrator.trial import checkpoint as ckpt
from orchestrator.trial.callbacks import Callback
from orchestrator.trial.trainer import Trainer

VOCAB, T = 7, 6


def config(**train) -> TrialConfig:
    return TrialConfig.from_dict(
        {
            "model": {"size": "bigram-1l", "gate": {"position": "G1"}},
            "data": {"source": "bigram-backcopy", "seq_len": T},
            "train": {"steps": 4, "batch_size": 2, "log_every": 2, "eval_every": 2, "checkpoint_every": 0, "warmup_steps": 0, **train},
            "eval": {"batches": 1, "batch_size": 2, "probe_sequences": 2},
        }
    )


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(VOCAB, VOCAB)
        self.proj = torch.nn.Linear(VOCAB, VOCAB)

    def forward(self, x):
        return self.proj(self.embed(x))

    def aux_loss(self):
        return torch.zeros(())


class FakeEngine:
    """The part of DeepSpeed's engine the trainer and the checkpoint callback use."""

    def __init__(self, loss_scale: float = 1.0):
        self.module = Tiny()
        self.opt = torch.optim.SGD(self.module.parameters(), lr=0.1)
        self.loss_scale = loss_scale
        self.checkpoint_engine = None
        self.saved: list[str] = []
        self.fail_save: Exception | None = None

    def __call__(self, x):
        return self.module(x) * self.loss_scale

    def backward(self, loss):
        loss.backward()

    def step(self):
        self.opt.step()
        self.opt.zero_grad()

    def get_global_grad_norm(self):
        return 0.5

    def get_lr(self):
        return [0.1]

    def save_checkpoint(self, folder, tag, client_state):
        (Path(folder) / tag).mkdir(parents=True)
        if self.fail_save is not None:
            (Path(folder) / tag / "half").write_text("x")
            raise self.fail_save
        torch.save(client_state, Path(folder) / tag / "state.pt")
        self.saved.append(tag)

    def load_checkpoint(self, folder, tag):
        path = Path(folder) / tag / "state.pt"
        return str(path), (torch.load(path, weights_only=True) if path.exists() else None)


class FakeData:
    def train_batch(self, i, batch_size, rank=0, world=1):
        g = torch.Generator().manual_seed(i)
        return torch.randint(0, VOCAB, (batch_size, T + 1), generator=g)


class Recorder(Callback):
    """Every event, in order, with what the trainer knew at that point."""

    state_key = "recorder"

    def __init__(self):
        self.events, self.loaded = [], None

    def on_start(self, trainer):
        self.trainer = trainer
        self.events.append(("on_start",))

    def after_resume(self, trainer):
        self.events.append(("after_resume", trainer.step, trainer.resumed_from))

    def on_step(self, step, loss, grad_norm):
        self.events.append(("on_step", step, grad_norm))

    def collect_metrics(self, step, metrics):
        metrics["recorder"] = step
        self.events.append(("collect_metrics", step))

    def on_log_interval(self, step, metrics):
        self.events.append(("on_log_interval", step, sorted(metrics)))

    def on_eval(self, step, result):
        self.events.append(("on_eval", step))

    def on_checkpoint(self, step):
        self.events.append(("on_checkpoint", step))

    def on_report(self, step, result, checkpointed):
        self.events.append(("on_report", step, checkpointed))

    def collect_final(self, metrics):
        self.events.append(("collect_final", sorted(metrics)))

    def on_end(self, step, metrics):
        self.events.append(("on_end", step))

    def state_dict(self):
        return {"events": len(self.events)}

    def load_state_dict(self, state):
        self.loaded = state


def trainer(cfg, callbacks, engine=None) -> Trainer:
    result = EvalResult({"val_loss": 1.5})
    return Trainer(cfg.train, engine or FakeEngine(), FakeData(), lambda: result, callbacks, seq_len=cfg.data.seq_len)


class FakeLogging:
    def __init__(self, run_dir=None):
        self.run_dir, self.calls, self.warnings = run_dir, [], []
        self.run_id = "f" * 32

    def flush(self, wait=0.0):
        whole = ckpt.latest_checkpoint(self.run_dir) if self.run_dir else None
        self.calls.append(("flush", wait, whole))
        return True

    def pop_warnings(self):
        out, self.warnings = self.warnings, []
        return out

    def log_artifact(self, path):
        self.calls.append(("artifact", path.name))

    def log_weights(self, path):
        self.calls.append(("weights", path.name))


def fake_trainer(**kw):
    return SimpleNamespace(
        **{"train_s": 0.0, "step_t0": 0.0, "tokens_seen": 0, "tokens_per_step": 100, "step": 0, "engine": FakeEngine(), **kw}
    )


def eval_result() -> EvalResult:
    metrics = {"val_loss": 1.0, "first_token_attn_uniform": 0.2, "max_activation/layer_1": 3.0, "max_activation/layer_0": 2.0}
    return EvalResult(metrics, attn_maps=[torch.eye(4)], attn_heads=[0], gate_hist=[[1, 2, 3]], first_token_per_layer=[0.3])
