"""`export(loaded, out, fmt)`: a gatesweep model as a Hugging Face folder, or in gatesweep's own format.

`hf`: config.json + model.safetensors + tokenizer files + generation_config.json, in the layout
`hf_layouts.hf_layout_for` picks (Qwen3 / Qwen3-MoE / Qwen3-Next / Laguna, which transformers
loads with no custom code; the paper's layout for G1 headwise), or the one `layout` names. `official`: the paper's layout. `gatesweep`:
model.safetensors with gatesweep's own tensor names + config.yaml (the trial config) +
tokenizer.json: takes every variant. An HF export is read back (`locate.load_hf`) and must give
the same tensors before it is reported written. The export's files are logged to the trial's
MLflow run under `export/<format>/`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from orchestrator import __version__
from orchestrator.tracking import RunLogger, names

from . import hf_layouts
from .errors import InteropError
from .locate import GATESWEEP_CONFIG, META_KEY, Loaded, load_gatesweep_export, load_hf, stored_dtype
from .outdir import staged
from .tokenizer_files import TOKENIZER_FILE, byte_hf_tokenizer, write_for_hf
from .weights_files import WEIGHTS_NAME, save_file

EXPORT_ARTIFACT_DIR = "export"
"""MLflow artifact folder of an export on the trial's run: `export/<format>/`."""
EXPORT_TAG_PREFIX = "gatesweep.export."
"""Tag `gatesweep.export.<format>` on the trial's run: the folder the export was written to."""
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class Exported:
    out: Path
    fmt: str
    layout: str | None
    dtype: torch.dtype
    files: list[Path]
    tokenizer: str | None
    """What the tokenizer files reproduce ('byte', 'bpe:8192', a path), None when none were written."""
    notes: list[str] = field(default_factory=list)
    logged: str | None = None

    @property
    def title(self) -> str:
        if self.layout is None:
            return "gatesweep's own format (model.safetensors + config.yaml)"
        return hf_layouts.LAYOUTS[self.layout].title


def parse_dtype(text: str) -> torch.dtype | None:
    if text == "auto":
        return None
    if text not in DTYPES:
        raise InteropError(f"--dtype: got {text!r}; allowed: auto, {', '.join(DTYPES)}")
    return DTYPES[text]


def export(
    loaded: Loaded,
    out: Path,
    fmt: str = "hf",
    *,
    layout: str | None = None,
    dtype: torch.dtype | None = None,
    tokenizer: bool = True,
    tokenizer_file: str | None = None,
    force: bool = False,
) -> Exported:
    cfg = loaded.model_cfg
    layout = hf_layouts.layout_for_format(cfg, fmt, layout)  # refuses before anything is written
    tok = loaded.tokenizer(tokenizer_file) if tokenizer else None
    if tok is not None and tok.vocab_size > cfg.vocab_size:
        raise InteropError(f"tokenizer {tok.name} has {tok.vocab_size} tokens, more than the model's vocabulary ({cfg.vocab_size})")
    dtype = dtype or stored_dtype(loaded.state)
    notes: list[str] = []
    if tokenizer and tok is None:
        n = loaded.trial.data.bigram.vocab_size if loaded.trial is not None else cfg.vocab_size - 1
        notes.append(
            f"trained on bigram-backcopy, which has no text tokenizer: no tokenizer files written (ids 0..{n - 1} are the task's tokens, {n} is BOS)"
        )
    trial = loaded.trial
    seq_len = trial.data.seq_len + 1 if trial is not None else 0
    keep = [loaded.path, loaded.path.parent if loaded.path.is_file() else None, tokenizer_file]
    with staged(out, force=force, keep=keep) as tmp:  # written whole into a sibling, then renamed to --out
        try:
            if layout is None:
                written = _write_gatesweep(loaded, tmp, dtype, tok)
            else:
                written = _write_hf(loaded, tmp, layout, dtype, tok, seq_len)
                if layout == "official":
                    notes.append(hf_layouts.OFFICIAL_NOTE)
        except OSError as err:
            raise InteropError(f"--out: writing {out} failed ({err.strerror or err})") from None
        _verify(loaded, tmp, layout, dtype)
    out = Path(out).expanduser().resolve()
    files = [out / p.name for p in written]
    return Exported(out, fmt, layout, dtype, files, tok.name if tok is not None else None, notes)


def _write_hf(loaded: Loaded, out: Path, layout: str, dtype: torch.dtype, tok, seq_len: int) -> list[Path]:
    cfg = loaded.model_cfg
    files = []
    ids: dict[str, int | None] = {}
    if tok is not None:
        ids = write_for_hf(tok, out, max(cfg.max_seq_len, seq_len))
        files += [out / TOKENIZER_FILE, out / "tokenizer_config.json", out / "special_tokens_map.json"]
    meta = {"model": cfg.to_dict(), "layout": layout, "version": __version__, "source": str(loaded.path)}
    config, tensors = hf_layouts.to_hf(cfg, loaded.state, layout, dtype=dtype, max_positions=seq_len, token_ids=ids, extra={META_KEY: meta})
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file(tensors, out / WEIGHTS_NAME, metadata={"format": "pt"})
    files += [out / "config.json", out / WEIGHTS_NAME]
    if ids:
        gen = {"bos_token_id": ids["bos"], "eos_token_id": ids["eos"], "do_sample": False}
        (out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
        files.append(out / "generation_config.json")
    return sorted(files)


def _write_gatesweep(loaded: Loaded, out: Path, dtype: torch.dtype, tok) -> list[Path]:
    import yaml

    trial = loaded.trial
    data: dict[str, Any] = trial.to_dict() if trial is not None else {"model": loaded.model_cfg.to_dict()}
    (out / GATESWEEP_CONFIG).write_text(yaml.safe_dump(data, sort_keys=False))
    tensors = {k: v.to(dtype) if v.is_floating_point() else v for k, v in loaded.state.items()}
    save_file(tensors, out / WEIGHTS_NAME, metadata={"format": "gatesweep"})
    files = [out / GATESWEEP_CONFIG, out / WEIGHTS_NAME]
    if tok is not None:
        (byte_hf_tokenizer() if tok.hf is None else tok.hf).save(str(out / TOKENIZER_FILE))
        files.append(out / TOKENIZER_FILE)
    return sorted(files)


def _verify(loaded: Loaded, out: Path, layout: str | None, dtype: torch.dtype) -> None:
    """Read the export back: every tensor must come back as written (the original in `dtype`)."""
    back = load_gatesweep_export(out) if layout is None else load_hf(out)
    for name, t in loaded.state.items():
        want = t.to(dtype) if t.is_floating_point() else t
        got = back.state.get(name)
        if layout == "qwen3_next" and name.endswith("norm.weight"):
            want = (t.float() - 1.0) + 1.0  # written zero-centred in float32 (hf_layouts.to_hf), read back as 1 + w
        if got is None or got.shape != want.shape or not torch.equal(got.to(want.dtype), want):
            raise InteropError(f"{out}: the export does not read back as written ({name}); nothing should be trusted there")


def log_export(exported: Exported, uri: str, run_id: str) -> str:
    """Log the export's files into the trial's run under export/<format>/ (weights above the
    artifact limit stay on disk; a tag says where)."""
    where = f"{EXPORT_ARTIFACT_DIR}/{exported.fmt}"
    tags = {EXPORT_TAG_PREFIX + exported.fmt: str(exported.out)}
    try:
        logger = RunLogger(uri, run_id, quiet=True)
        for path in exported.files:
            if path.name == WEIGHTS_NAME and path.stat().st_size > names.MAX_WEIGHTS_ARTIFACT_BYTES:
                tags[names.WEIGHTS_SKIPPED_TAG + ".export"] = (
                    f"{path.stat().st_size / 2**20:.0f} MiB exceed the {names.MAX_WEIGHTS_ARTIFACT_BYTES >> 20} MiB artifact limit; "
                    f"they are at {path}"
                )
                continue
            logger.log_artifact(path, where)
        logger.set_tags(tags)
    except Exception as err:  # MLflow's own errors (a deleted run, a read-only store): the export itself stands
        raise RuntimeError(f"run {run_id}: {type(err).__name__}: {' '.join(str(err).split())[:160]}") from err
    return where
