"""The training loop: optimizer steps of micro-batches through the DeepSpeed engine, held-out
evaluations and checkpoint points, and the events its callbacks watch (callbacks/base.py).
Checkpoints, spike rules, speed, MLflow, Ray Tune, the console and artifacts are callbacks."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable

import torch.nn.functional as F

from orchestrator.tracking.outcomes import TrialFailed
from orchestrator.trial.callbacks.base import Callback


class Trainer:
    """`run()` trains to `train.steps` from wherever `on_start` left the state; returns the final metrics."""

    def __init__(
        self,
        train,
        engine,
        data,
        evaluate: Callable,
        callbacks: Iterable[Callback],
        *,
        rank: int = 0,
        world: int = 1,
        device="cpu",
        seq_len: int,
    ):
        self.train, self.engine, self.model, self.data, self.evaluator = train, engine, engine.module, data, evaluate
        self.rank, self.world, self.device = rank, world, device
        self.callbacks = list(callbacks)
        self.tokens_per_step = train.batch_size * train.grad_accum * world * seq_len
        self.decay_bottoms = set(train.decay_steps())
        """Steps at the bottom of a decay: always evaluated (a WSD-S schedule's points)."""
        self.step = self.tokens_seen = self.resumed_from = 0
        self.train_s = self.eval_s = self.wall_s = 0.0
        self.step_t0 = 0.0  # perf_counter() when the current step began (the speed callback counts from it)
        # per-step events: bound methods of the callbacks that override them, built once
        self._on_step, self._collect, self._on_log = (self.hooks(e) for e in ("on_step", "collect_metrics", "on_log_interval"))

    def hooks(self, event: str) -> list[Callable]:
        return [getattr(cb, event) for cb in self.callbacks if getattr(type(cb), event) is not getattr(Callback, event)]

    def emit(self, event: str, *args) -> None:
        for fn in self.hooks(event):
            fn(*args)

    # ---- state (what a checkpoint holds) -----------------------------------------------
    def state_dict(self) -> dict:
        state = {"step": self.step, "tokens_seen": self.tokens_seen, "train_s": self.train_s}
        for cb in self.callbacks:
            if cb.state_key:
                state[cb.state_key] = cb.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.step, self.tokens_seen, self.train_s = state["step"], state["tokens_seen"], state["train_s"]
        self.resumed_from = self.step
        for cb in self.callbacks:
            if cb.state_key and cb.state_key in state:
                cb.load_state_dict(state[cb.state_key])

    # ---- the loop ----------------------------------------------------------------------
    def start(self) -> None:
        self.emit("on_start", self)
        self.emit("after_resume", self)

    def train_step(self, step: int) -> tuple[float, float | None]:
        train = self.train
        losses = []
        for micro in range(train.grad_accum):
            seq = self.data.train_batch(step * train.grad_accum + micro, train.batch_size, self.rank, self.world).to(self.device)
            logits = self.engine(seq[:, :-1])
            loss = F.cross_entropy(logits.float().flatten(0, 1), seq[:, 1:].flatten()) + self.model.aux_loss()
            value = loss.item()
            if not math.isfinite(value):
                raise TrialFailed(f"loss is {value} at step {step + 1} (micro-batch {micro}); training diverged", kind="diverged")
            self.engine.backward(loss)
            self.engine.step()
            losses.append(value)
        gn = self.engine.get_global_grad_norm()
        grad_norm = float(gn) if gn is not None else None
        return sum(losses) / len(losses), grad_norm

    def advance(self) -> None:
        """One optimizer step with its per-step callbacks. Its wall time, callbacks included, is
        what the speed counts; evaluations and checkpoints are not."""
        t0 = self.step_t0 = time.perf_counter()
        loss, grad_norm = self.train_step(self.step)
        self.step = step = self.step + 1
        self.tokens_seen += self.tokens_per_step
        for fn in self._on_step:
            fn(step, loss, grad_norm)
        if step % self.train.log_every == 0 or step == self.train.steps:
            metrics: dict[str, float] = {}
            for fn in self._collect:
                fn(step, metrics)
            for fn in self._on_log:
                fn(step, metrics)
        self.train_s += time.perf_counter() - t0

    def evaluate(self):
        t0 = time.perf_counter()
        result = self.evaluator()
        self.eval_s += time.perf_counter() - t0
        self.emit("on_eval", self.step, result)
        return result

    def run(self) -> dict[str, float]:
        train = self.train
        t_start = time.perf_counter()
        self.start()
        last = None
        while self.step < train.steps:
            self.advance()
            step = self.step
            final = step == train.steps
            is_eval = final or step in self.decay_bottoms or bool(train.eval_every and step % train.eval_every == 0)
            is_ckpt = final or bool(train.checkpoint_every and step % train.checkpoint_every == 0)
            if is_eval:
                last = self.evaluate()
            if is_ckpt:  # after the evaluation: COMPLETE is written once this step's metrics are all stored
                self.emit("on_checkpoint", step)
            if is_eval and not final:  # the final result goes to the caller
                self.emit("on_report", step, last, is_ckpt)
        if last is None:  # resumed a finished trial: evaluate the loaded weights once more
            last = self.evaluate()
        metrics = dict(last.metrics)
        self.emit("collect_final", metrics)
        metrics["eval_time_s/periodic"] = self.eval_s
        self.wall_s = time.perf_counter() - t_start  # resume, steps, evaluations, checkpoints; not the end's writes
        self.emit("on_end", self.step, metrics)
        return metrics
