"""`gatesweep export SOURCE --out DIR [--format hf]`: a trained model as a Hugging Face folder.

SOURCE is an MLflow run id, a trial folder (model.pt + run.json), a model.pt, or a `gatesweep
import` folder. `--format hf` (the default) writes config.json, model.safetensors and tokenizer
files that transformers loads with no custom code: Qwen3ForCausalLM (dense, ungated),
Qwen3MoeForCausalLM (MoE, ungated) or Qwen3NextForCausalLM with every layer full attention and
partial rotary 1.0 (G1 elementwise, dense or MoE), LagunaForCausalLM (a G1 softplus gate,
headwise or elementwise; dense, or MoE with top_k 1); G1 headwise is written in the paper's gated
layout (config flags headwise_attn_output_gate / elementwise_attn_output_gate), which transformers
loads with the paper's modeling_qwen3.py. `--layout NAME` asks for one layout (qwen3, qwen3_moe,
qwen3_next, official, laguna) and is refused, naming why, when it cannot hold the model. `--format official` writes that layout for G1
elementwise too; `--format gatesweep` (model.safetensors with gatesweep's names + config.yaml)
takes every variant. Other variants are refused, naming the formats they can take. The files are
logged to the trial's MLflow run under export/<format>/.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from orchestrator.core.errors import UserError

from ..tracking import redact_uri
from .commands import COMMAND_TABLE
from .common import tracking_uri
from .trialstore import explicit_store, log_step, logging_store, skip


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "export",
        help=COMMAND_TABLE["export"].help,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("source", help="MLflow run id, a trial folder, a model.pt, or a gatesweep import folder")
    p.add_argument("--out", required=True, help="folder to write (created; must be empty unless --force)")
    p.add_argument("--format", default="hf", choices=["hf", "official", "gatesweep"], help="hf (default), official, or gatesweep")
    p.add_argument(
        "--layout",
        help="with --format hf: qwen3, qwen3_moe, qwen3_next, official or laguna instead of the layout picked from the gate",
    )
    p.add_argument("--dtype", default="auto", help="auto (as stored), float32, bfloat16 or float16")
    p.add_argument("--tokenizer", help="a tokenizer.json to write instead of the trial's own")
    p.add_argument("--no-tokenizer", action="store_true", help="write the weights and config only")
    p.add_argument("--force", action="store_true", help="replace a non-empty --out folder")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default as for run)")
    p.add_argument("--no-log", action="store_true", help="do not log the export into the trial's MLflow run")
    return p


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def run(args) -> int:
    from gatedmodels import build_meta  # lazy: imports torch
    from orchestrator.interop.export import export, log_export, parse_dtype  # lazy: imports torch
    from orchestrator.interop.locate import RUN_ID, locate  # lazy: imports torch

    dtype = parse_dtype(args.dtype)
    by_run_id = RUN_ID.fullmatch(args.source) is not None and not Path(args.source).exists()
    explicit = explicit_store(args.tracking_uri)
    source_uri = (explicit or tracking_uri(None)) if by_run_id else None  # the run's store holds where its weights are
    loaded = locate(args.source, source_uri)
    if loaded.kind == "hf":
        raise UserError(f"{args.source}: already a Hugging Face folder (gatesweep import turns it into a gatesweep model)")
    done = export(
        loaded,
        Path(args.out),
        args.format,
        layout=args.layout,
        dtype=dtype,
        tokenizer=not args.no_tokenizer,
        tokenizer_file=args.tokenizer,
        force=args.force,
    )
    cfg = loaded.model_cfg
    n_params = build_meta(cfg).num_params()
    layers = f"{cfg.n_layers} layer{'s' if cfg.n_layers != 1 else ''}"
    print(f"exported {cfg.gate.label} ({layers}, d_model {cfg.d_model}, {n_params / 1e6:.2f}M parameters) from {loaded.path}")
    rows = [
        ("layout", done.title),
        ("dtype", str(done.dtype).removeprefix("torch.")),
        ("out", str(done.out)),
        ("files", ", ".join(f"{p.name} ({_size(p.stat().st_size)})" for p in done.files)),
    ]
    if done.tokenizer:
        rows.append(("tokenizer", f"{done.tokenizer}: AutoTokenizer adds BOS first, as in training"))
    if done.layout and done.layout != "official":
        rows.append(("load with", f'AutoModelForCausalLM.from_pretrained("{done.out}")'))
    rows.append(("read back", "every tensor as written"))
    for note in loaded.notes + done.notes:
        rows.append(("note", note))
    if not loaded.run_id:
        rows.append(("logged", "not logged: the source has no MLflow run (no run.json)"))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"  {key.ljust(width)}  {value}")
    if loaded.run_id and not args.no_log:
        uri, why = logging_store(source_uri or explicit, loaded.path)
        shown = redact_uri(uri) if uri else "URI"
        later = f"gatesweep export {args.source} --out {args.out} --format {args.format} --force --tracking-uri {shown}"
        what = f"the export (written to {done.out})"
        if uri is None:
            skip(what, why, later)
        else:
            log_step(
                what, lambda: f"  {'logged'.ljust(width)}  {log_export(done, uri, loaded.run_id)}/ in MLflow run {loaded.run_id}", later
            )
    return 0
