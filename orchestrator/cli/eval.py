"""`gatesweep eval TARGET --tasks mmlu,ruler,ppl`: benchmark a finished trial and log the results
into its MLflow run. TARGET is an MLflow run id, a trial's folder (holding model.pt and run.json)
or a model.pt file. Results are cached per weights hash, so evaluating again is free."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from orchestrator.tracking import names

from .common import UserError, print_table, tracking_uri

TASKS = ("mmlu", "ruler", "ppl")


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("eval", help="run MMLU / RULER-style / perplexity benchmarks on a finished trial", description=__doc__)
    p.add_argument("target", help="MLflow run id, a trial folder, or a model.pt file")
    p.add_argument("--tasks", default="mmlu,ruler,ppl", help="comma-separated: mmlu, ruler, ppl (default: all)")
    p.add_argument(
        "--limit",
        type=int,
        help="MMLU: at most N test questions per subject (default: all 14,042); "
        "RULER: N samples per task and length (default: the trial's eval.ruler.samples)",
    )
    p.add_argument("--ppl-sets", help="comma-separated perplexity sets (default: the trial's eval.ppl_sets, else its own corpus)")
    p.add_argument("--lengths", help="comma-separated RULER context lengths (default: the trial's eval.ruler.lengths)")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default as for run)")
    p.add_argument("--no-log", action="store_true", help="print only; do not log into the run")
    return p


def _locate(target: str, uri: str) -> tuple[Path, str | None]:
    """(model.pt path, MLflow run id or None)."""
    path = Path(target)
    if path.is_file():
        meta = path.parent / "run.json"
        return path, json.loads(meta.read_text())["run_id"] if meta.exists() else None
    if path.is_dir():
        if not (path / "model.pt").exists():
            raise UserError(f"{target}: no model.pt inside (has the trial finished?)")
        meta = path / "run.json"
        return path / "model.pt", json.loads(meta.read_text())["run_id"] if meta.exists() else None
    if re.fullmatch(r"[0-9a-f]{32}", target):
        from ..tracking import client

        try:
            run = client(uri).get_run(target)
        except Exception as err:
            raise UserError(f"run {target}: not found in {uri} ({type(err).__name__})") from None
        run_dir = run.data.tags.get(names.RUN_DIR_TAG)
        if not run_dir or not (Path(run_dir) / "model.pt").exists():
            raise UserError(f"run {target}: its weights are not on this machine (gatesweep.run_dir = {run_dir})")
        return Path(run_dir) / "model.pt", target
    raise UserError(f"{target}: not a file, a folder or an MLflow run id")


def run(args) -> int:
    import torch

    from gatedmodels import GatedTransformer
    from orchestrator.spec.trial import TrialConfig

    from ..data import DataUnavailable, build_trial_data
    from ..evals.suite import run_benchmarks
    from ..tracking import RunLogger

    tasks = tuple(t.strip() for t in args.tasks.split(",") if t.strip())
    bad = [t for t in tasks if t not in TASKS]
    if bad or not tasks:
        raise UserError(f"--tasks: got {args.tasks!r}; allowed: {', '.join(TASKS)} (comma-separated)")
    if args.limit is not None and args.limit < 1:
        raise UserError(f"--limit: got {args.limit}; allowed: >= 1")
    uri = tracking_uri(args.tracking_uri)
    model_path, run_id = _locate(args.target, uri)
    blob = torch.load(model_path, map_location="cpu", weights_only=True)
    cfg = TrialConfig.from_dict(blob["config"])
    if cfg.data.source == "bigram-backcopy":
        raise UserError(
            f"{args.target}: trained on bigram-backcopy, which has no text tokenizer; MMLU, RULER and perplexity sets need a text trial"
        )
    ev = cfg.eval
    ppl_sets = [s for s in (args.ppl_sets or "").split(",") if s] or ev.ppl_sets or [cfg.data.source]
    lengths = [int(x) for x in args.lengths.split(",")] if args.lengths else ev.ruler.lengths
    # the full benchmark unless --limit says otherwise (the trial's own limit was for its quick in-trial run)
    cfg = cfg.replace(
        eval=ev.replace(
            ppl_sets=ppl_sets,
            mmlu=ev.mmlu.replace(limit=args.limit),
            ruler=ev.ruler.replace(lengths=lengths, samples=args.limit or ev.ruler.samples),
        )
    )
    try:
        data = build_trial_data(cfg.data, cfg.train.seed)
    except DataUnavailable as err:
        raise UserError(f"data: {err}") from None
    model = GatedTransformer(cfg.model)
    model.load_state_dict(blob["model"])
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    model.to(device)
    try:
        metrics = run_benchmarks(model, data.tokenizer, cfg, device=device, which=tasks, progress=lambda line: print(line, flush=True))
    except DataUnavailable as err:
        raise UserError(str(err)) from None
    headline = {
        k: v
        for k, v in metrics.items()
        if k in ("mmlu_acc", "mmlu_acc_macro", "mmlu/questions", "mmlu/cut_prompts")
        or k.startswith(("ruler/", "ruler_avg/", "ppl/", "bpb/", "eval_time_s/"))
    }
    print_table([{"metric": k, "value": v} for k, v in headline.items()])
    if run_id and not args.no_log:
        logger = RunLogger(uri, run_id)
        logger.log_metrics(metrics, step=cfg.train.steps)
        logger.flush(wait=60)
        print(f"logged {len(metrics)} metrics into MLflow run {run_id}")
    return 0
