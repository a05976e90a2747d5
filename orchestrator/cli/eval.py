"""`gatesweep eval TARGET --tasks hellaswag,mmlu,ruler,ppl,length`: benchmark a finished trial and log the
results into its MLflow run. TARGET is an MLflow run id, a trial's folder (holding model.pt and
run.json) or a model.pt file. Tasks are lm-evaluation-harness tasks (offline data: `eval.tasks`),
`ruler` (the RULER-style suite), `ppl` (perplexity sets) and `length` (held-out loss at longer
lengths with RoPE as trained, YaRN and a raised base: `eval.length`; the one task for
bigram-backcopy trials). Results are cached per weights hash,
so evaluating again is free."""

from __future__ import annotations

import argparse
from pathlib import Path

from gatedmodels.typedconfig import ConfigError, did_you_mean
from orchestrator.core.errors import UserError

from ..data import DataUnavailable, build_trial_data
from ..evals.harness_data import allowed_text, base_task, data_problem, task_names
from ..spec.evaluation import cache_problem
from ..tracking import RunLogger, redact_uri
from .commands import COMMAND_TABLE
from .common import print_table, tracking_uri
from .trialstore import explicit_store, log_step, logging_store, skip

OWN = ("ruler", "ppl", "length")
MAX_RULER_SAMPLES = 100_000
"""eval.ruler.samples' bound."""
DEFAULT_TASKS = "hellaswag,arc_easy,arc_challenge,piqa,winogrande,sciq,lambada_openai,mmlu,ppl"


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "eval",
        help=COMMAND_TABLE["eval"].help,
        description=__doc__,
    )
    p.add_argument("target", help="MLflow run id, a trial folder, or a model.pt file")
    p.add_argument(
        "--tasks",
        default=DEFAULT_TASKS,
        help=f"comma-separated harness tasks, ruler, ppl, length (default: {DEFAULT_TASKS}; see `gatesweep schema`)",
    )
    p.add_argument(
        "--limit",
        type=int,
        help="harness tasks: at most N documents per task (default: all); "
        "RULER: N samples per task and length (default: the trial's eval.ruler.samples)",
    )
    p.add_argument("--num-fewshot", type=int, help="few-shot examples for every harness task (default: each task's harness default)")
    p.add_argument("--ppl-sets", help="comma-separated perplexity sets (default: the trial's eval.ppl_sets, else its own corpus)")
    p.add_argument(
        "--lengths",
        help="comma-separated context lengths of ruler and length (default: the trial's eval.ruler.lengths, "
        "eval.length.lengths, else 2, 4 and 8 times its training length)",
    )
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default as for run)")
    p.add_argument("--no-log", action="store_true", help="print only; do not log into the run")
    return p


def _load(target: str, uri: str | None):
    """The trial `target` names (`orchestrator.interop.locate`: a run id, a trial or import folder,
    a model.pt), its weights checked against its config and against the run it would log into."""
    from orchestrator.interop.locate import RUN_ID, locate  # lazy: imports torch

    path = Path(target).expanduser()
    if not path.exists() and not RUN_ID.fullmatch(target):
        raise UserError(f"{target}: not a file, a folder or an MLflow run id")
    if path.is_dir() and not (path / "model.pt").exists() and (path / "run.json").exists():
        raise UserError(f"{target}: no model.pt inside (has the trial finished?)")
    loaded = locate(target, uri)
    if loaded.kind != "trial":
        raise UserError(
            f"{target}: a Hugging Face or export folder; `gatesweep import` it first (gatesweep eval takes the imported folder)"
        )
    if loaded.trial is None:
        raise UserError(f"{loaded.path}: {loaded.notes[0].split('; only its model section')[0]}; gatesweep eval needs its data section")
    return loaded


def _lengths(text: str) -> list[int]:
    try:
        lengths = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--lengths: got {text!r}; allowed: comma-separated whole numbers of tokens, e.g. 128,256,512") from None
    if not lengths or min(lengths) < 2:
        raise UserError(f"--lengths: got {text!r}; allowed: lengths of 2 tokens or more")
    return lengths


def _checked_flags(args) -> list[str]:
    """The --tasks list, with --limit and --num-fewshot checked; UserError naming the flag (and
    what a misspelt task is close to)."""
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    known = set(task_names())
    bad = [t for t in tasks if t not in OWN and t not in known]
    if bad or not tasks:
        raise UserError(
            f"--tasks: got {', '.join(repr(t) + did_you_mean(t, [*OWN, *known]) for t in bad) or repr(args.tasks)}; "
            f"allowed: ruler, ppl, length, and harness tasks: {allowed_text()}"
        )
    if args.limit is not None and args.limit < 1:
        raise UserError(f"--limit: got {args.limit}; allowed: >= 1")
    if args.limit is not None and "ruler" in tasks and args.limit > MAX_RULER_SAMPLES:
        raise UserError(f"--limit: got {args.limit}; allowed: 1..{MAX_RULER_SAMPLES:,} with ruler (its samples per task and length)")
    if args.num_fewshot is not None and not 0 <= args.num_fewshot <= 64:
        raise UserError(f"--num-fewshot: got {args.num_fewshot}; allowed: 0..64")
    return tasks


def run(args) -> int:
    from orchestrator.interop.locate import RUN_ID  # lazy: imports torch

    tasks = _checked_flags(args)
    harness = [t for t in tasks if t not in OWN]
    by_run_id = RUN_ID.fullmatch(args.target) is not None and not Path(args.target).exists()
    explicit = explicit_store(args.tracking_uri)
    source_uri = (explicit or tracking_uri(None)) if by_run_id else None  # the run's store holds where its weights are
    loaded = _load(args.target, source_uri)
    cfg = _configured(args, loaded.trial, tasks, harness)
    which = tuple(t for t in ("tasks", "ruler", "ppl", "length") if (t == "tasks" and harness) or t in tasks)
    metrics = _evaluate(cfg, loaded.state, which)
    shown = [
        {"metric": k, "value": v, "stderr": metrics.get(f"{k}_stderr", "")}
        for k, v in metrics.items()
        if (k.split("/")[0] in harness and not k.endswith("_stderr"))
        or k.startswith(
            ("harness/", "ruler/", "ruler_avg/", "ppl/", "bpb/", "length_loss/", "length_copy/", "length_excess/", "eval_time_s/")
        )
    ]
    print_table(shown)
    if loaded.run_id and not args.no_log:
        _log(args, loaded, source_uri or explicit, metrics, cfg.train.steps)
    return 0


def _configured(args, cfg, tasks: list[str], harness: list[str]):
    """The trial's config with its eval section set by the flags, checked (the cache kind, the
    harness tasks' data) before the weights are loaded; UserError naming the target."""
    if cfg.data.source == "bigram-backcopy" and set(tasks) != {"length"}:
        raise UserError(
            f"{args.target}: trained on bigram-backcopy, which has no text tokenizer; harness tasks, RULER and perplexity sets "
            "need a text trial (allowed here: --tasks length)"
        )
    ev = cfg.eval
    known = set(task_names())
    generating = [f"--tasks {t}" for t in tasks if t == "ruler" or (t in known and getattr(base_task(t), "kind", "") == "generate_until")]
    if problem := cache_problem(cfg.model.attention.kind, generating):
        raise UserError(f"{args.target}: model.attention.kind {problem}")
    for name in harness:  # before the weights are loaded
        task = base_task(name)
        problem = data_problem(name, ev.tasks.data, ev.tasks.paths.get(task.dataset) if task else None)
        if problem:
            raise UserError(problem)
    ppl_sets = ([s for s in (args.ppl_sets or "").split(",") if s] or ev.ppl_sets or [cfg.data.source]) if "ppl" in tasks else ev.ppl_sets
    lengths = _lengths(args.lengths) if args.lengths else None
    train_len = cfg.data.seq_len
    # the full benchmark unless --limit says otherwise (the trial's own limit was for its quick in-trial run)
    try:
        return cfg.replace(
            eval=ev.replace(
                ppl_sets=ppl_sets,
                tasks=ev.tasks.replace(names=harness, limit=args.limit, num_fewshot=args.num_fewshot),
                ruler=ev.ruler.replace(
                    lengths=lengths or ev.ruler.lengths, samples=(args.limit if "ruler" in tasks else None) or ev.ruler.samples
                ),
                length=ev.length.replace(lengths=lengths or ev.length.lengths or [2 * train_len, 4 * train_len, 8 * train_len]),
            )
        )
    except ConfigError as err:  # e.g. --lengths beyond the learned positions of the model
        raise UserError(f"{args.target}: {err.render()} (set the lengths with --lengths)") from None


def _evaluate(cfg, state: dict, which: tuple[str, ...]) -> dict:
    """The benchmarks `which` of the model `cfg` with the weights `state`, on a GPU when there is one."""
    import torch  # lazy: torch itself

    from gatedmodels import GatedTransformer  # lazy: imports torch

    from ..evals.suite import run_benchmarks  # lazy: imports torch

    try:
        data = build_trial_data(cfg.data, cfg.train.seed)
    except DataUnavailable as err:
        raise UserError(f"data: {err}") from None
    model = GatedTransformer(cfg.model)
    model.load_state_dict(state)
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    model.to(device)
    try:
        return run_benchmarks(
            model, getattr(data, "tokenizer", None), cfg, device=device, which=which, progress=lambda line: print(line, flush=True)
        )
    except DataUnavailable as err:
        raise UserError(str(err)) from None


def _log(args, loaded, given: str | None, metrics: dict, step: int) -> None:
    """Log the results into the trial's run (its store: `trialstore.logging_store`), or say why not
    and how to later (the results are cached, so evaluating again only logs)."""
    uri, why = logging_store(given, loaded.path)
    later = f"gatesweep eval {args.target} --tasks {args.tasks} --tracking-uri {redact_uri(uri) if uri else 'URI'} (the results are cached)"
    what = f"{len(metrics)} metrics of MLflow run {loaded.run_id}"
    if uri is None:
        skip(what, why, later)
        return

    def log() -> str:
        logger = RunLogger(uri, loaded.run_id, quiet=True)
        logger.log_metrics(metrics, step=step)
        if not logger.flush(wait=60):
            raise RuntimeError("the store did not take the metrics within 60 s")
        return f"logged {len(metrics)} metrics into MLflow run {loaded.run_id}"

    log_step(what, log, later)
