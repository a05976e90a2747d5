"""`gatesweep import DIR [--out OUT]`: a Hugging Face model as a gatesweep model folder.

DIR is a local Hugging Face folder (config.json + model.safetensors or shards + tokenizer.json),
a gatesweep export, or a Hub name (owner/name) when online (GATESWEEP_ONLINE=1). Supported:
Qwen3ForCausalLM, Qwen3MoeForCausalLM, Qwen3NextForCausalLM with every layer full attention and
partial rotary 1.0 (its gate is G1 elementwise), and the paper's gated Qwen3 (config flags
headwise_attn_output_gate / elementwise_attn_output_gate, q_proj grouped per KV head). Anything
gatesweep cannot compute exactly (linear-attention layers, partial rotary, shared experts,
sliding windows, biases, other RoPE types) is refused, naming the field.

OUT (default imports/<name>) is laid out like a finished trial: model.pt, tokenizer.json,
config.yaml, import.json; `gatesweep eval OUT`, `gatesweep probe OUT` and `gatesweep export OUT`
take it. Its data section (--data, --seq-len) is what `gatesweep eval` measures perplexity on.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from orchestrator.core.errors import UserError

from .commands import COMMAND_TABLE


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "import",
        help=COMMAND_TABLE["import"].help,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("source", help="a local Hugging Face folder, a gatesweep export folder, or a Hub name when online")
    p.add_argument("--out", help="folder to write (default: imports/<name>)")
    p.add_argument(
        "--data", default="wikipedia", help="the data source of its trial config, for gatesweep eval's perplexity (default: wikipedia)"
    )
    p.add_argument(
        "--seq-len", type=int, default=1024, help="sequence length of its trial config (default: 1024, at most the model's context)"
    )
    p.add_argument("--dtype", default="auto", help="auto (as stored), float32, bfloat16 or float16")
    p.add_argument("--tokenizer", help="a tokenizer.json to use instead of the folder's")
    p.add_argument("--force", action="store_true", help="replace a non-empty --out folder")
    return p


def run(args) -> int:
    from gatedmodels import build_meta  # lazy: imports torch
    from orchestrator.interop.export import parse_dtype  # lazy: imports torch
    from orchestrator.interop.hf_layouts import LAYOUTS  # lazy: imports torch
    from orchestrator.interop.import_ import import_model  # lazy: imports torch
    from orchestrator.interop.locate import locate  # lazy: imports torch

    if args.seq_len < 2:
        raise UserError(f"--seq-len: got {args.seq_len}; allowed: >= 2")
    dtype = parse_dtype(args.dtype)
    loaded = locate(args.source)
    out = Path(args.out) if args.out else Path("imports") / loaded.name
    done = import_model(
        loaded, out, data_source=args.data, seq_len=args.seq_len, dtype=dtype, tokenizer_file=args.tokenizer, force=args.force
    )
    cfg = loaded.model_cfg
    arch = LAYOUTS[loaded.layout].title if loaded.layout else "gatesweep's own format"
    print(f"imported {loaded.path}: {arch}")
    tok = done.tokenizer
    bos = tok.hf.id_to_token(tok.bos_id) if tok.hf is not None else "<bos>"
    moe = f", {cfg.moe.n_experts} experts top-{cfg.moe.top_k}" if cfg.moe.n_experts else ""
    rows = [
        (
            "model",
            f"{cfg.gate.label}, {cfg.n_layers} layer{'s' if cfg.n_layers != 1 else ''}, d_model {cfg.d_model}, {cfg.n_heads} / {cfg.n_kv_heads} heads of {cfg.head_dim}{moe}",
        ),
        ("parameters", f"{build_meta(cfg).num_params() / 1e6:.2f}M, {str(done.dtype).removeprefix('torch.')}"),
        (
            "rope",
            f"base {cfg.rope.base:g}"
            + (f", YaRN x{cfg.rope.factor:g} from {cfg.rope.original_max_len}" if cfg.rope.scaling == "yarn" else ""),
        ),
        ("tokenizer", f"{tok.vocab_size} tokens; every sequence starts with {bos} (id {tok.bos_id})"),
        ("out", str(done.out)),
        ("next", f"gatesweep probe {done.out} --data {args.data}   |   gatesweep eval {done.out} --tasks ppl"),
    ]
    rows += [("note", n) for n in done.notes]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"  {key.ljust(width)}  {value}")
    return 0
