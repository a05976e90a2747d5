"""One trial: TrialConfig -> data -> GatedTransformer -> DeepSpeed engine -> train loop with
periodic evaluation and checkpoints -> one MLflow run with every paper metric.

`run_trial(cfg, ctx)` is what `gatesweep train` calls directly and what each Ray Tune trial calls
in its worker. Everything a trial needs to find its state again (checkpoint folder, MLflow run id)
is in `TrialContext`, so a retried or resumed trial continues where it stopped, in the same run.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import socket
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from gatedmodels import GatedTransformer

from orchestrator.trial import plots
from orchestrator.spec.trial import TrialConfig
from orchestrator.data import DataUnavailable, build_trial_data
from orchestrator.trial.distributed import import_deepspeed, process_group
from orchestrator.evals.heldout import EvalResult, evaluate, probes_artifact
from orchestrator.tracking.outcomes import OUTCOME_TAG, REASON_TAG, STATUS, STOPPED_TAG, TrialFailed, classify
from orchestrator.trial.spikes import SpikeDetector
from orchestrator.tracking import RunLogger, git_state, package_versions, redact_uri

FINAL_METRICS = ("val_loss", "val_ppl", "val_bpb", "first_token_attn", "sink_ratio", "max_activation",
                 "gate_score_mean", "loss_spikes", "tokens_per_s")


@dataclass
class TrialContext:
    """Where and how a trial runs (not part of its config hash)."""

    run_dir: Path
    """Absolute folder for checkpoints, the final weights and artifacts staged for MLflow."""
    tracking_uri: str
    """Absolute MLflow tracking URI."""
    experiment: str = "gatesweep"
    run_id: str | None = None
    """Continue this MLflow run (retries, resumes, runs pre-created by a sweep)."""
    run_name: str | None = None
    parent_run_id: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    resume: bool = True
    """Continue from the newest checkpoint in run_dir when there is one."""
    num_threads: int | None = None
    report: Callable[[dict, Path | None], None] | None = None
    """Called after each evaluation with the metrics and the newest checkpoint folder (Ray Tune)."""
    progress: Callable[[str], None] | None = None
    """Receives one human-readable line per log interval (the CLI prints them)."""
    on_run: Callable[[str], None] | None = None
    """Called with the MLflow run id as soon as the run exists (to find it again on resume)."""


@dataclass
class TrialResult:
    run_id: str
    metrics: dict[str, float]
    steps: int
    wall_s: float
    train_s: float
    resumed_from: int = 0


def lr_lambda(train) -> Callable[[int], float]:
    """Linear warmup to the peak, then cosine decay to lr * min_lr_ratio."""

    def fn(step: int) -> float:
        if train.warmup_steps and step < train.warmup_steps:
            return (step + 1) / train.warmup_steps
        span = max(1, train.steps - train.warmup_steps)
        progress = min(1.0, (step - train.warmup_steps) / span)
        return train.min_lr_ratio + (1 - train.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return fn


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Decay matrices of linear layers; not norms, gains, embeddings or constant gate logits."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.ndim >= 2 and "embed" not in name and "logits_hw" not in name else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _load_weights_only(engine) -> None:
    """DeepSpeed 0.19 loads checkpoints with `torch.load(weights_only=False)`, which executes
    whatever a tampered checkpoint file contains; load tensors and plain containers only."""
    ce = engine.checkpoint_engine
    if ce is None:
        return

    def load(path: str, map_location=None):
        return torch.load(path, map_location=map_location, weights_only=True)

    ce.load = load


def _disk_report(path: Path) -> str:
    """Free space and the file-size limit where a write failed (torch.save reports a full disk as
    a RuntimeError about stream positions, which tells a user nothing)."""
    import resource

    try:
        free = shutil.disk_usage(path).free
    except OSError:
        free = -1
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    limit = "none" if soft == resource.RLIM_INFINITY else f"{soft / 2**20:.0f} MiB"
    return f"free space {free / 2**30:.1f} GiB, file-size limit {limit}"


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def checkpoint_dir(run_dir: Path) -> Path:
    return run_dir / "checkpoints"


COMPLETE = "COMPLETE"  # written into a checkpoint folder once DeepSpeed has finished saving it


def _complete_checkpoints(run_dir: Path) -> list[Path]:
    tags = [p for p in checkpoint_dir(run_dir).glob("step*") if p.name[4:].isdigit() and (p / COMPLETE).exists()]
    return sorted(tags, key=lambda p: int(p.name[4:]))


def latest_checkpoint(run_dir: Path) -> str | None:
    """The newest checkpoint known to be whole. DeepSpeed's own `latest` file is not trusted:
    a process killed while writing it leaves it empty or pointing at a half-written folder."""
    tags = _complete_checkpoints(run_dir)
    return tags[-1].name if tags else None


def _prune_checkpoints(run_dir: Path, keep: int) -> None:
    """Keep the newest `keep` whole checkpoints; drop older ones and half-written leftovers."""
    whole = _complete_checkpoints(run_dir)
    newest = int(whole[-1].name[4:]) if whole else -1
    for path in checkpoint_dir(run_dir).glob("step*"):
        stale = path in whole[:-keep] or (path not in whole and path.name[4:].isdigit() and int(path.name[4:]) < newest)
        if stale:
            shutil.rmtree(path, ignore_errors=True)


@dataclass
class _Window:
    """Step metrics accumulated between two log lines."""

    losses: list[float] = field(default_factory=list)
    grad_norms: list[float] = field(default_factory=list)
    tokens: int = 0
    seconds: float = 0.0


class _Trainer:
    """State of one running trial; `run_trial` drives it."""

    def __init__(self, cfg: TrialConfig, ctx: TrialContext, rank: int, world: int):
        self.cfg, self.ctx, self.rank, self.world = cfg, ctx, rank, world
        self.is_main = rank == 0
        self.device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
        self.logger: RunLogger | None = None
        self.run_id = ctx.run_id
        self.history: list[tuple[int, float]] = []
        self.spikes = SpikeDetector(cfg.train.spikes)
        self.step = 0
        self.tokens_seen = 0
        self.train_s = 0.0
        self.eval_s = 0.0

    # ---- setup -----------------------------------------------------------------------
    def build(self) -> None:
        """Data, model, optimizer and DeepSpeed engine. Each stage's failure is classified
        (outcomes.classify): bad data and configs DeepSpeed refuses are permanent, not retried."""
        cfg = self.cfg
        seed_everything(cfg.train.seed)
        with _stage("data"):
            try:
                self.data = build_trial_data(cfg.data, cfg.train.seed)
            except DataUnavailable as err:
                raise TrialFailed(f"data: {err}", kind="bad_data") from None
        with _stage("model"):
            self.model_cfg = cfg.model.replace(vocab_size=self.data.vocab_size)
            torch.manual_seed(cfg.train.seed)
            model = GatedTransformer(self.model_cfg)
            optimizer = torch.optim.AdamW(param_groups(model, cfg.train.weight_decay), lr=cfg.train.lr, betas=tuple(cfg.train.betas))
            scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg.train))
        with _stage("deepspeed"):
            self.ds_json = cfg.deepspeed.to_json(cfg.train, on_gpu=self.device.type == "cuda", world_size=self.world)
            deepspeed = import_deepspeed()
            self.engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, lr_scheduler=scheduler, config=self.ds_json)
            _load_weights_only(self.engine)
            self.model = self.engine.module
        with _stage("data"):
            self.val_batches = self.data.val_batches(cfg.eval.batches, cfg.eval.batch_size)

    def open_run(self) -> None:
        """Open (or reopen) the MLflow run before anything can fail, so that every failure,
        building included, is recorded in the run with its reason."""
        if not self.is_main:
            return
        cfg, ctx = self.cfg, self.ctx
        tags = {
            "gatesweep.config_hash": cfg.config_hash(),
            "gatesweep.run_dir": str(ctx.run_dir),
            "gatesweep.gate": cfg.model.gate.label,
            "gatesweep.task": cfg.data.source,
            "gatesweep.host": socket.gethostname(),
            "gatesweep.pid": os.getpid(),
            **{f"version.{k}": v for k, v in package_versions().items()},
            **git_state(),
            **ctx.tags,
        }
        if self.run_id is None:
            name = ctx.run_name or f"{cfg.model.gate.label}-{cfg.model.size}-s{cfg.train.seed}"
            self.logger = RunLogger.create(ctx.tracking_uri, ctx.experiment, run_name=name, tags=tags, parent_run_id=ctx.parent_run_id)
            self.run_id = self.logger.run_id
        else:
            self.logger = RunLogger(ctx.tracking_uri, self.run_id)
            self.logger.set_tags(tags)
        self.logger.client.update_run(self.run_id, status="RUNNING")
        (ctx.run_dir / "run.json").write_text(json.dumps({"run_id": self.run_id, "config_hash": cfg.config_hash(),
                                                         "experiment": ctx.experiment}))
        if ctx.on_run is not None:
            ctx.on_run(self.run_id)
        self.logger.set_tags({"gatesweep.tracking_uri": redact_uri(ctx.tracking_uri)})

    def log_params(self) -> None:
        """The full resolved config (known once the data fixed the vocabulary) and the engine's JSON."""
        if self.logger is None:
            return
        params = {**self.cfg.flatten(), **{f"model.{k}": v for k, v in self.model_cfg.flatten().items()}}
        params.pop("tracking.uri", None)  # may hold credentials; the tag is redacted
        params.update({"data.vocab_size": self.data.vocab_size, "world_size": self.world,
                       "model.num_params": self.model.num_params(), "model.gate_params": self.model.gate_params()})
        self.logger.log_params(params)
        self.logger.set_tags({"gatesweep.deepspeed": json.dumps(self.ds_json)})

    def maybe_resume(self) -> None:
        tag = latest_checkpoint(self.ctx.run_dir) if self.ctx.resume else None
        if tag is None:
            return
        _, state = self.engine.load_checkpoint(str(checkpoint_dir(self.ctx.run_dir)), tag=tag)
        if state is None:
            raise TrialFailed(f"checkpoint {tag} in {checkpoint_dir(self.ctx.run_dir)} could not be loaded")
        self.step = state["step"]
        self.tokens_seen = state["tokens_seen"]
        self.train_s = state["train_s"]
        self.history = [tuple(x) for x in state["history"]]
        self.spikes.load_state_dict(state["spikes"])
        self.resumed_from = self.step

    # ---- loop ------------------------------------------------------------------------
    def batch_position(self, step: int, micro: int) -> dict:
        return {"step": step, "micro_batch": micro, "rank": self.rank, "seed": self.cfg.train.seed,
                "sequences": [(step * self.cfg.train.grad_accum + micro) * self.world * self.cfg.train.batch_size + self.rank * self.cfg.train.batch_size,
                              self.cfg.train.batch_size]}

    def train_step(self, step: int) -> tuple[float, float | None]:
        train = self.cfg.train
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
        """One optimizer step with its bookkeeping (spike rules, step metrics). Its wall time,
        bookkeeping included, is what tokens_per_s counts; evaluation and checkpoints are not."""
        t0 = time.perf_counter()
        train, w = self.cfg.train, self.window
        loss, grad_norm = self.train_step(self.step)
        self.step += 1
        self.tokens_seen += self.tokens_per_step
        w.losses.append(loss)
        if grad_norm is not None:
            w.grad_norms.append(grad_norm)
        w.tokens += self.tokens_per_step
        self.history.append((self.step, loss))
        self.spikes.update(self.step, loss, grad_norm, self.batch_position(self.step - 1, 0))
        if self.step % train.log_every == 0 or self.step == train.steps:
            metrics = {
                "train/loss": sum(w.losses) / len(w.losses),
                "train/loss_max": max(w.losses),
                "train/lr": self.engine.get_lr()[0],
                "train/tokens_per_s": w.tokens / max(w.seconds + time.perf_counter() - t0, 1e-9),
                "train/tokens_seen": self.tokens_seen,
                **self.spikes.summary(),
            }
            if w.grad_norms:
                metrics["train/grad_norm"] = sum(w.grad_norms) / len(w.grad_norms)
            self._log(metrics)
            self._progress(f"step {self.step}/{train.steps} loss {metrics['train/loss']:.4f} lr {metrics['train/lr']:.2e} "
                           f"{metrics['train/tokens_per_s']:.0f} tok/s")
            self.window = _Window()
        dt = time.perf_counter() - t0
        self.window.seconds += dt if self.window is w else 0.0
        self.train_s += dt
        if self.step > 1:  # the first step pays one-off allocation and thread start-up
            self.timed_tokens += self.tokens_per_step
            self.timed_s += dt

    def start(self) -> None:
        """Resume if there is a checkpoint; reset the step counters."""
        train = self.cfg.train
        self.resumed_from = 0
        self.maybe_resume()
        if self.resumed_from and self.logger is not None:
            self.logger.set_tags({"gatesweep.resumed_from_step": self.resumed_from})
        self.tokens_per_step = train.batch_size * train.grad_accum * self.world * self.cfg.data.seq_len
        self.window = _Window()
        self.timed_tokens, self.timed_s = 0, 0.0

    def run(self) -> TrialResult:
        train = self.cfg.train
        t_start = time.perf_counter()
        self.start()
        last_eval: EvalResult | None = None
        while self.step < train.steps:
            self.advance()
            final = self.step == train.steps
            is_eval = final or (train.eval_every and self.step % train.eval_every == 0)
            is_ckpt = final or (train.checkpoint_every and self.step % train.checkpoint_every == 0)
            if is_eval:
                last_eval = self.evaluate()
            if is_ckpt:  # after the evaluation: COMPLETE is written once this step's metrics are all stored
                self.save_checkpoint()
            if is_eval and self.ctx.report is not None and not final:  # the final result is reported by the caller
                # every point the scheduler is about to judge is in the store first, so a trial
                # that ASHA stops at this report keeps all it logged, whatever happens next
                if self.logger is not None:
                    self.logger.flush(wait=60)
                warnings = self.logger.pop_warnings() if self.logger is not None else []
                self.ctx.report({"step": self.step, **last_eval.metrics, **({"warnings": warnings} if warnings else {})},
                                checkpoint_dir(self.ctx.run_dir) if is_ckpt else None)
        if last_eval is None:  # resumed a finished trial: evaluate the loaded weights once more
            last_eval = self.evaluate()
        final_metrics = dict(last_eval.metrics)
        final_metrics.update(self.benchmarks())
        final_metrics.update(self.spikes.summary())
        final_metrics["tokens_per_s"] = self.timed_tokens / self.timed_s if self.timed_s else self.tokens_seen / max(self.train_s, 1e-9)
        final_metrics["train_time_s"] = self.train_s
        final_metrics["eval_time_s/periodic"] = self.eval_s
        wall = time.perf_counter() - t_start
        self._log({"tokens_per_s": final_metrics["tokens_per_s"], "train_time_s": self.train_s})
        self.finish_artifacts(last_eval)
        return TrialResult(self.run_id or "", final_metrics, self.step, wall, self.train_s, self.resumed_from)

    def benchmarks(self) -> dict[str, float]:
        """MMLU, RULER-style and perplexity sets, once, on the final weights (text data only)."""
        ev = self.cfg.eval
        which = tuple(name for name, on in (("mmlu", ev.mmlu.enabled), ("ruler", ev.ruler.enabled), ("ppl", bool(ev.ppl_sets))) if on)
        if not which or not self.is_main:
            return {}
        from orchestrator.evals.suite import run_benchmarks

        t0 = time.perf_counter()
        metrics = run_benchmarks(self.model, self.data.tokenizer, self.cfg, device=self.device, which=which, progress=self._progress)
        metrics["eval_time_s/benchmarks"] = time.perf_counter() - t0
        self._log(metrics)
        return metrics

    def evaluate(self) -> EvalResult:
        t0 = time.perf_counter()
        result = evaluate(self.model, self.data, self.val_batches, self.cfg.eval, device=self.device)
        self.eval_s += time.perf_counter() - t0
        self._log({**result.metrics, "eval_time_s/periodic": self.eval_s})
        m = result.metrics
        line = f"eval step {self.step}: val_loss {m['val_loss']:.4f} first_token_attn {m['first_token_attn']:.3f} sink_ratio {m['sink_ratio']:.2f}"
        if "gate_score_mean" in m:
            line += f" gate_score_mean {m['gate_score_mean']:.3f}"
        self._progress(line)
        return result

    def save_checkpoint(self) -> None:
        ckpt = checkpoint_dir(self.ctx.run_dir)
        ckpt.mkdir(parents=True, exist_ok=True)
        state = {"step": self.step, "tokens_seen": self.tokens_seen, "train_s": self.train_s,
                 "history": self.history, "spikes": self.spikes.state_dict(), "config_hash": self.cfg.config_hash()}
        tag = f"step{self.step}"
        try:
            self.engine.save_checkpoint(str(ckpt), tag=tag, client_state=state)
        except (OSError, RuntimeError) as err:  # disk full, quota, unwritable: say so, leave nothing that looks whole
            shutil.rmtree(ckpt / tag, ignore_errors=True)
            raise TrialFailed(f"checkpoint {tag} could not be written to {ckpt} ({type(err).__name__}: "
                              f"{str(err).strip().splitlines()[-1][:200]}); {_disk_report(ckpt)}", kind="disk") from None
        if self.is_main:
            # every point up to this step reaches the store before the checkpoint counts as
            # whole, so a trial resumed from it has no gap in its curves
            if self.logger is not None:
                self.logger.flush(wait=60)
            (ckpt / tag / COMPLETE).write_text(f"{self.step}\n")
            _prune_checkpoints(self.ctx.run_dir, self.cfg.train.keep_checkpoints)

    def _log(self, metrics: dict) -> None:
        if self.logger is not None:
            self.logger.log_metrics(metrics, self.step)

    def _progress(self, line: str) -> None:
        if self.is_main and self.ctx.progress is not None:
            self.ctx.progress(line)

    # ---- end -------------------------------------------------------------------------
    def finish_artifacts(self, last: EvalResult) -> None:
        if not self.is_main:
            return
        try:
            self._write_artifacts(last)
        except OSError as err:
            raise TrialFailed(f"artifacts could not be written to {self.ctx.run_dir}: {err} "
                              "(training finished and its metrics are logged)", kind="disk") from None

    def _write_artifacts(self, last: EvalResult) -> None:
        out = self.ctx.run_dir / "artifacts"
        out.mkdir(parents=True, exist_ok=True)
        resolved = self.cfg.replace(model=self.model_cfg)
        import yaml

        (out / "config.yaml").write_text(yaml.safe_dump(resolved.to_dict(), sort_keys=False))
        (out / "deepspeed.json").write_text(json.dumps(self.ds_json, indent=2))
        (out / "spikes.json").write_text(json.dumps({"rules": self.cfg.train.spikes.to_dict(), "events": self.spikes.events}, indent=2))
        (out / "probes.json").write_text(json.dumps(probes_artifact(last)))
        state = {k: v.detach().cpu() for k, v in self.model.state_dict().items()}
        tmp = self.ctx.run_dir / f"model.pt.tmp{os.getpid()}"
        try:
            torch.save({"model": state, "config": resolved.to_dict()}, tmp)
            os.replace(tmp, self.ctx.run_dir / "model.pt")  # never a half-written model.pt
        finally:
            tmp.unlink(missing_ok=True)
        label = self.cfg.model.gate.label
        steps, losses = zip(*self.history) if self.history else ((), ())
        plots.loss_curve(list(steps), list(losses), self.spikes.events, out / "loss_curve.png", f"training loss ({label})")
        m = last.metrics
        plots.first_token_per_layer(last.first_token_per_layer, m["first_token_attn_uniform"], out / "first_token_attn.png", f"first-token attention ({label})")
        if last.attn_maps:
            plots.attention_map(last.attn_maps[-1], out / "attention_map.png", f"last layer, most sink-like head ({label})")
        if last.gate_hist:
            plots.gate_histogram(last.gate_hist, out / "gate_hist.png", f"gate scores ({label})")
        for path in sorted(out.iterdir()):
            self.logger.log_artifact(path)


def run_trial(cfg: TrialConfig, ctx: TrialContext) -> TrialResult:
    """Train and evaluate one trial; raise TrialFailed (after recording it) when it cannot finish.

    The MLflow run is opened before anything else can fail, so every ending (outcomes.py) is
    recorded in it: status, `gatesweep.outcome`, and the reason."""
    ctx.run_dir = Path(ctx.run_dir).resolve()
    ctx.run_dir.mkdir(parents=True, exist_ok=True)
    threads = cfg.train.threads or ctx.num_threads or len(os.sched_getaffinity(0))
    torch.set_num_threads(max(1, threads))
    with process_group() as (rank, world), torch.enable_grad():
        trainer = _Trainer(cfg, ctx, rank, world)
        trainer.open_run()
        try:
            trainer.build()
            trainer.log_params()
            result = trainer.run()
        except SystemExit:  # Ray Tune stops a trial (e.g. ASHA) by raising SystemExit in report()
            _record_end(trainer, "stopped", f"stopped by the scheduler at step {trainer.step}")
            raise
        except KeyboardInterrupt:
            _record_end(trainer, "interrupted", "interrupted")
            raise
        except BaseException as err:
            failed = classify(err, "train")
            failed.run_id = trainer.run_id
            _record_end(trainer, failed.kind, failed.reason,
                        None if isinstance(err, TrialFailed) else "".join(traceback.format_exception(err)))
            if failed is err:
                raise
            raise failed from err
        if trainer.logger is not None:
            trainer.logger.set_tags({OUTCOME_TAG: "finished"})
            trainer.logger.finish("FINISHED")
        return result


class _stage:
    """`with _stage("data"):` turns any exception into the classified TrialFailed of that stage."""

    def __init__(self, name: str):
        self.name = name

    def __enter__(self):
        return self

    def __exit__(self, tp, err, tb):
        if err is None or not isinstance(err, Exception) or isinstance(err, TrialFailed):
            return False
        raise classify(err, self.name) from err


def _record_end(trainer: _Trainer, outcome: str, reason: str, traceback_text: str | None = None) -> None:
    """Record how a trial ended early; never raises (the original error matters more)."""
    if trainer.logger is None:
        return
    tags = {OUTCOME_TAG: outcome, (STOPPED_TAG if outcome == "stopped" else REASON_TAG): reason[:4000]}
    try:
        trainer.logger.set_tags(tags)
        if traceback_text:
            trainer.logger.log_text(traceback_text, "failure_traceback.txt")
        trainer.logger.finish(STATUS[outcome], wait=30)
    except Exception:
        pass
