"""Benchmarks through lm-evaluation-harness: gatesweep's model as a harness `LM`, and a runner.

`GatesweepLM` answers the harness's three request types on a trained `GatedTransformer` with the
trial's tokenizer, through the batched primitives in `lm`:

- `loglikelihood`: the harness tokenizes (context, continuation) as `TemplateLM` does (the
  continuation is the tail of encode(context + continuation), trailing spaces of the context moved
  into it); gatesweep then prepends BOS to every context (the project's convention: the sink forms
  on BOS; the harness adds none for GPT-2-style models) and scores with `score_requests`: requests
  sorted longest first, right padding, rows with an identical model input shared, so a four-way
  multiple choice costs one row when the choices are single tokens. A context longer than
  `max_len` is cut from the left and BOS kept.
- `loglikelihood_rolling`: disjoint rolling windows of `max_len` (the harness's
  `get_rolling_token_windows`, BOS as the prefix token), every document's windows scored in
  one batched call, summed per document.
- `generate_until`: greedy decoding with the KV cache (`lm.generate_requests`), batched and
  length-sorted, each row stopping when a stop string appears in its text (`StopStrings`), at
  EOS or after `max_gen_toks`; the text is cut before the first stop string, as the harness's HF
  model does. A prompt longer than `max_len - max_gen_toks` is cut from the left, BOS kept.

Inputs cut to `max_len` are counted (`harness/cut_contexts`) and logged, one line per request
type, as the harness warns when it truncates.

`run_tasks` loads the harness's own task definitions (prompts, few-shot selection, metrics,
filters, standard errors and groups), points each at its offline data (`harness_data`), runs
`lm_eval.evaluator.evaluate`, and returns MLflow metrics named `<task>/<metric>` and
`<task>/<metric>_stderr` (`hellaswag/acc_norm`, `mmlu_stem/acc`); a metric of a non-default
filter is `<task>/<metric>/<filter>` (`gsm8k/exact_match/flexible-extract`). `<task>_bpb` is the
bits per byte of the gold continuation of a multiple-choice task (`<task>_bpb/bits_per_byte`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from pathlib import Path

from ..data.sources import DataUnavailable
from ..data.tokenizers import Tokenizer
from .harness_data import BPB_SUFFIX, base_task, locate
from .lm import Model, generate_requests, score_requests

DEFAULT_MAX_GEN_TOKS = 256
log = logging.getLogger(__name__)


def _lm_base():
    from lm_eval.api.model import TemplateLM

    return TemplateLM


class StopStrings:
    """`stop_when` of a generation: whether one of `until` appears in the new tokens' text. Only
    the tail that can hold a new occurrence is decoded: a stop string of L bytes lies within the
    last L tokens when every token is at least one byte (special tokens, which decode to nothing,
    get 2 more tokens of margin, as the harness's own stop criterion has), so each step costs the
    same however long the generation; the first occurrence is found at the step it appears."""

    def __init__(self, tok: Tokenizer, until: tuple[str, ...]):
        self.tok, self.until = tok, until
        self.lookback = max((len(u.encode("utf-8")) for u in until), default=0) + 3

    def __call__(self, ids: list[int]) -> bool:
        if not self.until:
            return False
        text = self.tok.decode(ids[-self.lookback :])
        return any(u in text for u in self.until)


class GatesweepLM(_lm_base()):  # type: ignore[misc]
    def __init__(
        self,
        model: Model,
        tokenizer: Tokenizer,
        *,
        max_len: int,
        batch_size: int,
        batch_tokens: int | None = None,
        kv_cache: bool = True,
        progress: Callable[[str], None] | None = None,
    ):
        super().__init__()
        self.model, self.tok, self.max_len, self.batch_size = model, tokenizer, max_len, batch_size
        self.batch_tokens, self.kv_cache, self.progress = batch_tokens, kv_cache, progress
        self.n_cut = 0
        self.n_requests = 0

    @property
    def eot_token_id(self) -> int:
        return self.tok.eos_id if self.tok.eos_id is not None else self.tok.bos_id

    @property
    def prefix_token_id(self) -> int:
        return self.tok.bos_id

    @property
    def max_length(self) -> int:
        return self.max_len

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs) -> list[int]:
        return self.tok.encode([string])[0].tolist() if string else []

    def tok_decode(self, ids) -> str:
        return self.tok.decode(ids)

    def _cut(self, n_cut: int, n: int, what: str) -> None:
        """Count and log the inputs cut from the left to `max_len` (the harness warns per request)."""
        self.n_cut += n_cut
        if n_cut:
            line = f"{n_cut} of {n} {what} longer than max_len {self.max_len} tokens: cut from the left, BOS kept"
            log.warning(line)
            if self.progress:
                self.progress(f"harness: {line}")

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs) -> list[tuple[float, bool]]:
        bos = self.tok.bos_id
        pairs = [([bos, *ctx] if not ctx or ctx[0] != bos else list(ctx), list(cont)) for _, ctx, cont in requests]
        pairs = [(c, x) if x else (c[:-1], c[-1:]) for c, x in pairs]  # an empty continuation scores its last context token
        scores, greedy, n_cut = score_requests(
            self.model, pairs, max_len=self.max_len, batch_size=self.batch_size, batch_tokens=self.batch_tokens
        )
        self._cut(n_cut, len(pairs), "contexts")
        self.n_requests += len(pairs)
        return list(zip(scores, greedy))

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        """Every document's disjoint windows scored in one batched, length-sorted call, summed per document."""
        from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

        windows, owner = [], []
        for d, req in enumerate(requests):
            (text,) = req.args
            for w in get_rolling_token_windows(self.tok_encode(text), self.prefix_token_id, self.max_len - 1, 1):
                windows.append(make_disjoint_window(w))
                owner.append(d)
        scores, _, _ = score_requests(self.model, windows, max_len=self.max_len, batch_size=self.batch_size, batch_tokens=self.batch_tokens)
        out = [0.0] * len(requests)
        for d, score in zip(owner, scores):
            out[d] += score
        self.n_requests += len(requests)
        return out

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        groups: dict[tuple, list[int]] = {}
        for i, req in enumerate(requests):
            _, kwargs = req.args
            until = kwargs.get("until") or []
            until = [until] if isinstance(until, str) else list(until)
            max_gen = int(kwargs.get("max_gen_toks", DEFAULT_MAX_GEN_TOKS))
            groups.setdefault((tuple(until), max_gen), []).append(i)
        results: dict[int, str] = {}
        for (until, max_gen), idx in groups.items():
            max_gen = min(max_gen, self.max_len - 2)
            prompts = [[self.tok.bos_id, *self.tok_encode(requests[i].args[0])] for i in idx]
            gens, n_cut = generate_requests(
                self.model,
                prompts,
                max_new_tokens=max_gen,
                max_len=self.max_len,
                stop_ids=[self.tok.eos_id] if self.tok.eos_id is not None else [],
                stop_when=StopStrings(self.tok, until),
                batch_size=self.batch_size,
                batch_tokens=self.batch_tokens,
                kv_cache=self.kv_cache,
            )
            self._cut(n_cut, len(prompts), "prompts")
            for i, ids in zip(idx, gens):
                text = self.tok.decode(ids)
                for u in until:
                    text = text.split(u)[0]
                results[i] = text
        self.n_requests += len(requests)
        return [results[i] for i in range(len(requests))]


def _gold_bpb_config(base_cfg: dict) -> dict:
    """A loglikelihood task scoring only the gold choice: bits per byte of the gold continuation."""
    from lm_eval.api.task import ConfigurableTask

    probe = ConfigurableTask(config=dict(base_cfg))

    def doc_to_target(doc) -> str:
        """The gold choice as the multiple-choice task scores it: target delimiter + choice text
        (a loglikelihood task adds no delimiter of its own)."""
        choices = probe.doc_to_choice(doc)
        gold = probe.doc_to_target(doc)
        return probe.config.target_delimiter + (choices[gold] if isinstance(gold, int) else str(gold))

    def process_results(doc, results):
        (ll, _) = results[0]
        return {"bits_per_byte": (ll, len(doc_to_target(doc).encode("utf-8")))}

    cfg = dict(base_cfg)
    cfg.update(
        task=f"{base_cfg['task']}{BPB_SUFFIX}",
        output_type="loglikelihood",
        doc_to_target=doc_to_target,
        doc_to_choice=None,
        process_results=process_results,
        metric_list=[{"metric": "bits_per_byte", "aggregation": "bits_per_byte", "higher_is_better": False}],
    )
    return cfg


def task_manager(names: list[str]):
    """The harness's task manager over the folders of `names`' definitions only (`HarnessTask.folder`:
    a fraction of a second, where its whole catalogue takes about 4 CPU-seconds to index); the whole
    catalogue when one of them is not where gatesweep expects it (a harness that moved a task)."""
    from lm_eval import tasks as harness_tasks
    from lm_eval.tasks import TaskManager

    wanted = [base_task(name) for name in names]
    folders = sorted({t.folder for t in wanted if t is not None and t.folder})
    if folders and all(t is not None and t.folder for t in wanted):
        root = Path(harness_tasks.__file__).parent
        manager = TaskManager(include_defaults=False, include_path=[root / folder for folder in folders])
        if all(t.name in manager._index for t in wanted if t is not None):
            return manager
    return TaskManager()


def load_tasks(names: list[str], *, num_fewshot: int | None, data_root: str | None = None, paths: dict[str, str] | None = None) -> dict:
    """The harness's task objects for `names` (its `TaskManager.load` layout), each built from the
    harness's registered definition with its data pointed at the offline copy. (A dict spec would
    pass its own `task` list down to the children in 0.4.13, so entries are built one by one.)"""
    from lm_eval.api.task import ConfigurableTask
    from lm_eval.tasks._yaml_loader import load_yaml

    logging.getLogger("lm_eval").setLevel(logging.WARNING)
    manager = task_manager(names)
    built: list = []
    for name in names:
        task = base_task(name)
        assert task is not None, name
        where, overrides = locate(name, data_root, paths)
        overrides["dataset_path"] = where
        if num_fewshot is not None:
            overrides["num_fewshot"] = num_fewshot
        entry = manager._index[task.name]
        try:
            if name.endswith(BPB_SUFFIX):
                base_cfg = {**load_yaml(entry.yaml_path, resolve_func=True), **overrides}
                for key in ("tag", "group", "task_list"):
                    base_cfg.pop(key, None)
                built.append(ConfigurableTask(config=_gold_bpb_config(base_cfg)))
            else:
                built.append(manager._factory.build(entry, overrides=overrides, registry=manager._index))
        except Exception as err:  # datasets and the harness raise many types; the user needs one line
            first = (str(err).strip().splitlines() or [""])[0][:300]
            raise DataUnavailable(f"task {name}: the harness cannot load its data from {where} ({type(err).__name__}: {first})") from None
    return manager.load(built)


def metric_names(results: dict) -> dict[str, float]:
    """The harness's results as flat MLflow metrics: `task/metric`, `task/metric_stderr`."""
    out: dict[str, float] = {}
    for task, values in results.items():
        if task.startswith("gatesweep::"):
            continue
        for key, value in values.items():
            if "," not in key or not isinstance(value, int | float) or isinstance(value, bool):
                continue
            metric, filt = key.split(",", 1)
            name = f"{task}/{metric}" if filt == "none" else f"{task}/{metric.replace('_stderr', '')}/{filt}"
            if filt != "none" and metric.endswith("_stderr"):
                name += "_stderr"
            value = float(value)
            if math.isfinite(value):
                out[name] = value
    return out


def run_tasks(
    model: Model,
    tokenizer: Tokenizer,
    names: list[str],
    *,
    limit: int | None,
    num_fewshot: int | None = None,
    max_len: int = 2048,
    batch_size: int = 16,
    batch_tokens: int | None = None,
    data_root: str | None = None,
    paths: dict[str, str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, float]:
    """Run harness tasks on `model` with the seeds of the harness's `simple_evaluate` (python 0,
    numpy and torch and few-shot 1234); MLflow metrics (see the module docstring) plus
    `eval_time_s/harness`, `harness/requests` and `harness/cut_contexts`."""
    import random

    import numpy as np
    import torch
    from lm_eval.evaluator import evaluate

    t0 = time.perf_counter()
    random.seed(0)
    np.random.seed(1234)
    loaded = load_tasks(names, num_fewshot=num_fewshot, data_root=data_root, paths=paths)
    for task in loaded["tasks"].values():
        task.set_fewshot_seed(seed=1234)
    lm = GatesweepLM(model, tokenizer, max_len=max_len, batch_size=batch_size, batch_tokens=batch_tokens, progress=progress)
    with torch.random.fork_rng():
        torch.manual_seed(1234)
        results = evaluate(lm=lm, task_dict=loaded, limit=limit, bootstrap_iters=1000, log_samples=False, verbosity="WARNING")
    seconds = time.perf_counter() - t0
    out = metric_names(results["results"] if results else {})
    out["eval_time_s/harness"] = seconds
    out["harness/requests"] = lm.n_requests
    out["harness/cut_contexts"] = lm.n_cut
    if progress:
        shown = ", ".join(f"{k} {v:.4f}" for k, v in out.items() if k.split("/")[0] in names and k.count("/") == 1 and "stderr" not in k)
        progress(f"harness: {shown} ({lm.n_requests} requests in {seconds:.0f} s)")
    return out
