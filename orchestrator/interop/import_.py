"""`import_model(loaded, out)`: a Hugging Face model (or a gatesweep export) as a gatesweep model folder.

The folder is laid out like a finished trial's, so every command that takes a trial takes it:

    OUT/model.pt        {"model": GatedTransformer state dict, "config": a trial config}
    OUT/tokenizer.json  the model's tokenizer, without a post-processor that adds special tokens
                        (gatesweep puts BOS first itself), named by the config's data.tokenizer
    OUT/config.yaml     the same trial config, to read
    OUT/import.json     where it came from: source, layout, architecture, dtype, notes

The trial config's data section (`--data`, `--seq-len`) is what `gatesweep eval` uses for its
perplexity set and RULER's training length; the model section is the imported architecture.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from gatedmodels.typedconfig import ConfigError
from orchestrator.spec.trial import TrialConfig

from . import hf_layouts
from .errors import InteropError
from .locate import GATESWEEP_CONFIG, IMPORT_META, Loaded, stored_dtype
from .outdir import check_out, staged
from .tokenizer_files import TOKENIZER_FILE, copy_for_gatesweep


@dataclass
class Imported:
    out: Path
    trial: Any
    """The TrialConfig written into model.pt."""
    dtype: torch.dtype
    tokenizer: Any
    """The gatesweep `Tokenizer` (orchestrator.data.tokenizers) of OUT/tokenizer.json."""
    notes: list[str] = field(default_factory=list)


def import_model(
    loaded: Loaded,
    out: Path,
    *,
    data_source: str = "wikipedia",
    seq_len: int = 1024,
    dtype: torch.dtype | None = None,
    tokenizer_file: str | None = None,
    experiment: str = "gatesweep-imports",
    force: bool = False,
) -> Imported:
    import yaml

    if loaded.kind == "trial":
        raise InteropError(f"{loaded.path}: already a gatesweep model (export, eval and probe take it as it is)")
    cfg = loaded.model_cfg
    source_tok = Path(tokenizer_file) if tokenizer_file else loaded.tokenizer_file
    if source_tok is None:
        raise InteropError(
            f"{loaded.path}: no {TOKENIZER_FILE} (gatesweep eval and probe need the model's tokenizer; pass --tokenizer FILE)"
        )
    if not source_tok.exists():
        raise InteropError(f"--tokenizer: {source_tok}: no such file")
    seq_len = min(seq_len, cfg.max_seq_len)
    out = check_out(out, force=force, keep=[loaded.path, tokenizer_file])  # before anything is read or written
    tok = copy_for_gatesweep(source_tok)  # the cache's copy, named by content: nothing is written to --out yet
    if tok.vocab_size > cfg.vocab_size:
        raise InteropError(f"{source_tok}: {tok.vocab_size} tokens, more than the model's vocabulary ({cfg.vocab_size})")

    def trial_dict(tokenizer: Path) -> dict:
        return {
            "model": cfg.to_dict(),
            "data": {"source": data_source, "tokenizer": str(tokenizer), "seq_len": seq_len},
            "tracking": {"experiment": experiment},
        }

    try:
        trial = TrialConfig.from_dict(trial_dict(Path(tok.name)))
    except ConfigError as err:
        raise InteropError(f"the imported model's trial config does not validate ({err})") from None
    final = trial.to_dict()
    final["data"]["tokenizer"] = str(out / TOKENIZER_FILE)  # where the copy will be once --out is in place
    dtype = dtype or stored_dtype(loaded.state)
    keep = loaded.layout == "qwen3_next"  # its norms are 1 + w in float32 (hf_layouts.state_from_hf): a bf16 copy would round them
    state = {k: v if keep and k.endswith("norm.weight") else v.to(dtype) if v.is_floating_point() else v for k, v in loaded.state.items()}
    layout = hf_layouts.LAYOUTS[loaded.layout] if loaded.layout else None
    meta = {
        "source": str(loaded.path),
        "kind": loaded.kind,
        "layout": loaded.layout,
        "architecture": layout.architecture if layout else None,
        "gate": cfg.gate.label,
        "dtype": str(dtype).removeprefix("torch."),
        "bos": {"id": tok.bos_id, "token": _token(tok, tok.bos_id)},
        "notes": loaded.notes,
    }
    with staged(out, force=force, keep=[loaded.path, tokenizer_file]) as tmp:  # written whole, then renamed to --out
        (tmp / TOKENIZER_FILE).write_text(Path(tok.name).read_text(encoding="utf-8"), encoding="utf-8")
        torch.save({"model": state, "config": final}, tmp / "model.pt")
        (tmp / GATESWEEP_CONFIG).write_text(yaml.safe_dump(final, sort_keys=False))
        (tmp / IMPORT_META).write_text(json.dumps(meta, indent=2) + "\n")
    trial = TrialConfig.from_dict(final)
    return Imported(out, trial, dtype, tok, list(loaded.notes))


def _token(tok, idx: int) -> str | None:
    if tok.hf is None:
        return None
    return tok.hf.id_to_token(idx)
