"""`gatesweep probe MODEL --data SOURCE [--sequences N] [--seq-len T]`: the paper's probes on any model.

MODEL is an MLflow run id, a trial folder, a model.pt, a `gatesweep import` folder, a Hugging Face
folder (imported in memory) or a Hub name when online. SOURCE is a text source as in `data.source`
(its held-out split, encoded with the model's own tokenizer, BOS first) or `bigram-backcopy` for a
model trained on it. Prints first-token attention per layer and head, Gu et al.'s sink ratio,
massive activations, gate-score statistics and the loss on those sequences; writes probe.json
and the PNGs (attention maps, first-token attention per layer, gate histogram) to --out; --log
puts them in a new MLflow run (tagged with the model it probed).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from orchestrator.core.errors import UserError
from orchestrator.data import DataUnavailable
from orchestrator.data.sources import source_problem
from orchestrator.spec.paths import checked_path
from orchestrator.tracking import RunLogger, names, redact_uri

from .commands import COMMAND_TABLE
from .common import tracking_uri
from .trialstore import explicit_store, log_step, logging_store, skip

PROBE_OF_TAG = "gatesweep.probe_of"
"""Tag of a probe's MLflow run: what it probed (a run id or a path)."""
PROBE_WARNINGS_TAG = "gatesweep.probe_warnings"
"""Tag of a probe's MLflow run whose probe tensors held NaN or inf (its metrics from them are NaN)."""


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "probe",
        help=COMMAND_TABLE["probe"].help,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", help="MLflow run id, trial or import folder, model.pt, Hugging Face folder, or a Hub name when online")
    p.add_argument("--data", required=True, help="a text source (shakespeare, kjv, wikipedia, a local file, hf:NAME) or bigram-backcopy")
    p.add_argument("--sequences", type=int, default=16, help="held-out sequences probed in one pass (default: 16)")
    p.add_argument("--seq-len", type=int, default=256, help="tokens per sequence, BOS first (default: 256)")
    p.add_argument("--sink-eps", type=float, default=0.3, help="Gu et al.'s threshold (default: 0.3)")
    p.add_argument("--sink-tokens", type=int, default=64, help="positions the sink ratio looks at (default: 64, as Gu et al.)")
    p.add_argument("--dtype", default="auto", help="auto (as stored), float32, bfloat16 or float16")
    p.add_argument("--tokenizer", help="a tokenizer.json to encode with instead of the model's")
    p.add_argument("--out", help="folder for probe.json and the PNGs (default: probes/<name>)")
    p.add_argument("--log", action="store_true", help="log metrics, probe.json and the PNGs to a new MLflow run")
    p.add_argument("--experiment", default="gatesweep-probes", help="MLflow experiment of --log (default: gatesweep-probes)")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default as for run)")
    return p


def _sequences(loaded, args):
    """(N, T + 1) held-out token ids, BOS first, and the bytes per token id."""
    T, N = args.seq_len, args.sequences
    vocab = loaded.model_cfg.vocab_size
    if args.data == "bigram-backcopy":
        from orchestrator.data.bigram_backcopy import BigramBackcopy  # lazy: imports torch

        trial = loaded.trial
        if trial is None or trial.data.source != "bigram-backcopy":
            raise UserError("--data bigram-backcopy: the model was not trained on bigram-backcopy (give a text source)")
        data = BigramBackcopy(trial.data.bigram, T, trial.train.seed)
        if data.vocab_size != vocab:
            raise UserError(f"--data bigram-backcopy: its {data.vocab_size} tokens do not match the model's vocabulary ({vocab})")
        return data.val_batches(1, N)[0], data.token_bytes, "BOS"
    problem = checked_path(args.data, source_problem)
    if problem:
        raise UserError(f"--data: {problem}")
    tok = loaded.tokenizer(args.tokenizer)
    if tok is None:
        raise UserError(f"{args.model}: trained on bigram-backcopy, which has no text tokenizer; probe it with --data bigram-backcopy")
    if tok.vocab_size > vocab:
        raise UserError(f"tokenizer {tok.name}: {tok.vocab_size} tokens, more than the model's vocabulary ({vocab})")
    from orchestrator.data.text import heldout_windows  # lazy: imports torch

    try:
        seqs = heldout_windows(args.data, tok, T, 0.05, max_windows=N)
    except DataUnavailable as err:
        raise UserError(f"--data: {err}") from None
    bos = tok.hf.id_to_token(tok.bos_id) if tok.hf is not None else "<bos>"
    return seqs, tok.token_bytes, f"{bos} (id {tok.bos_id})"


def run(args) -> int:
    import torch  # lazy: torch itself

    from orchestrator.interop.export import parse_dtype  # lazy: imports torch
    from orchestrator.interop.locate import build_model, locate  # lazy: imports torch
    from orchestrator.interop.probe import run_probe, write_plots  # lazy: imports torch

    if not 1 <= args.sequences <= 4096:
        raise UserError(f"--sequences: got {args.sequences}; allowed: 1..4096")
    if not 2 <= args.seq_len <= 1_048_576:
        raise UserError(f"--seq-len: got {args.seq_len}; allowed: 2..1048576")
    if not 0 < args.sink_eps < 1:
        raise UserError(f"--sink-eps: got {args.sink_eps}; allowed: between 0 and 1")
    if args.sink_tokens < 1:
        raise UserError(f"--sink-tokens: got {args.sink_tokens}; allowed: >= 1")
    dtype = parse_dtype(args.dtype)
    explicit = explicit_store(args.tracking_uri)
    source_uri = (explicit or tracking_uri(None)) if _looks_like_run_id(args.model) else None  # where its weights are
    loaded = locate(args.model, source_uri)
    cfg = loaded.model_cfg
    if cfg.position_encoding == "learned" and args.seq_len > cfg.max_seq_len:
        raise UserError(f"--seq-len: got {args.seq_len}; the model's learned positions allow at most {cfg.max_seq_len}")
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    _check_memory(cfg, args, device)
    seqs, token_bytes, bos = _sequences(loaded, args)
    model = build_model(loaded, dtype, device)
    report = run_probe(model, seqs, token_bytes, sink_eps=args.sink_eps, sink_tokens=args.sink_tokens)
    out = Path(args.out) if args.out else Path("probes") / loaded.name
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "probe.json").write_text(
            json.dumps({"model": str(loaded.path), "data": args.data, "bos": bos, **report.to_json()}, indent=1)
        )
        files = [out / "probe.json", *write_plots(report, out, cfg.gate.label)]
    except OSError as err:
        raise UserError(f"--out: {out} cannot be written ({err.strerror or err})") from None
    _print(loaded, args, report, bos, len(seqs))
    for line in report.warnings:
        print(f"gatesweep: warning: {line}", file=sys.stderr)
    print(f"wrote {', '.join(str(p) for p in files)}")
    if args.log:
        _log_step(loaded, args, report, files, source_uri or explicit)
    return 0


def _log_step(loaded, args, report, files, given: str | None) -> None:
    """--log: a new run in the store given with --tracking-uri (created if need be, as `train`
    does: the flag asks for it), else in the trial's own store (`trialstore.logging_store`), or one
    warning saying why not and how to later."""
    if given:
        uri, why = given, ""
    else:
        uri, why = logging_store(None, loaded.path if loaded.kind == "trial" else None)
    later = f"gatesweep probe {args.model} --log --tracking-uri {redact_uri(uri) if uri else 'URI'} (with the same options)"
    if uri is None:
        skip(f"the probe (written to {files[0].parent})", why, later)
        return
    log_step(
        f"the probe (written to {files[0].parent})",
        lambda: f"logged into MLflow run {_log(loaded, args, report, files, uri)} (experiment {args.experiment})",
        later,
    )


def _check_memory(cfg, args, device) -> None:
    """Refuse a probe pass the machine cannot hold, with the figure, before anything is allocated."""
    from orchestrator.interop.probe import available_bytes, probe_bytes  # lazy: imports torch

    need, have = probe_bytes(cfg, args.sequences, args.seq_len), available_bytes(device)
    if need > have:
        raise UserError(
            f"--seq-len {args.seq_len} x --sequences {args.sequences}: one probe pass holds about {need / 2**30:,.1f} GiB "
            f"(the attention of {cfg.n_layers} layers x {cfg.n_heads} heads, {args.seq_len}^2 per sequence); "
            f"this machine has {have / 2**30:,.1f} GiB available ({device.type}); lower --sequences or --seq-len"
        )


def _looks_like_run_id(text: str) -> bool:
    from orchestrator.interop.locate import RUN_ID  # lazy: imports torch

    return bool(RUN_ID.fullmatch(text)) and not Path(text).exists()


def _print(loaded, args, report, bos: str, n: int) -> None:
    cfg = loaded.model_cfg
    m = report.metrics
    kind = {"trial": "gatesweep", "hf": loaded.layout, "gatesweep": "gatesweep export"}[loaded.kind]
    layers = f"{cfg.n_layers} layer{'s' if cfg.n_layers != 1 else ''} x {cfg.n_heads} head{'s' if cfg.n_heads != 1 else ''}"
    print(f"probe of {loaded.path} ({kind}: {cfg.gate.label}, {layers})")
    print(f"  {n} held-out sequences of {args.data} x {report.seq_len} tokens, first token {bos}")
    print(f"  loss {m['val_loss']:.4f}  ppl {m['val_ppl']:.4g}  bits/byte {m['val_bpb']:.4f}")
    print(f"  first-token attention {m['first_token_attn']:.3f} (uniform attention: {m['first_token_attn_uniform']:.3f})")
    print(f"  sink ratio (Gu et al., eps {args.sink_eps}, first {args.sink_tokens} tokens) {m['sink_ratio']:.3f}")
    print(
        f"  massive activations: M-Act {m['max_activation']:.4g}, peak {m['max_activation/peak']:.4g}, peak/median {m['max_activation/ratio']:.4g}"
    )
    if "gate_score_mean" in m:
        print(
            f"  gate score mean {m['gate_score_mean']:.3f}, below 1e-2 {m['gate_frac_below_1e-2']:.3f}, below 1e-3 {m['gate_frac_below_1e-3']:.3f}, "
            f"below 0.1 {m['gate_frac_below_0.1']:.3f}, above 1 {m['gate_frac_above_1']:.3f}"
        )
    else:
        print("  gate scores: - (no gate)")
    print(f"  value norm at BOS / others {m['value_norm_bos_ratio']:.3f}")
    gates = report.gate_mean_per_layer
    header = f"  {'layer':>5}  {'F-Attn':>6}  {'sink':>5}  {'M-Act':>9}  {'median':>8}  {'gate':>5}  first-token attention per head"
    print(header)
    for i, heads in enumerate(report.first_token_heads):
        gate = f"{gates[i]:.3f}" if gates else "-"
        cells = " ".join(f"{h:.2f}" for h in heads[:16]) + (" ..." if len(heads) > 16 else "")
        print(
            f"  {i:>5}  {sum(heads) / len(heads):>6.3f}  {sum(report.sink_heads[i]) / len(heads):>5.2f}  "
            f"{report.max_per_layer[i]:>9.4g}  {report.median_per_layer[i]:>8.3g}  {gate:>5}  {cells}"
        )


def _log(loaded, args, report, files, uri: str) -> str:
    tags = {names.KIND_TAG: names.PROBE_KIND, PROBE_OF_TAG: loaded.run_id or str(loaded.path), names.GATE_TAG: loaded.model_cfg.gate.label}
    if report.warnings:
        tags[PROBE_WARNINGS_TAG] = "; ".join(report.warnings)
    try:
        logger = RunLogger.create(uri, args.experiment, run_name=f"probe-{loaded.name}", tags=tags, quiet=True)
        params = {f"model.{k}": v for k, v in loaded.model_cfg.flatten().items()}
        params.update(
            {"probe.data": args.data, "probe.sequences": report.sequences, "probe.seq_len": report.seq_len, "probe.sink_eps": args.sink_eps}
        )
        logger.log_params(params)
        logger.log_metrics(report.metrics, step=0)
        for path in files:
            logger.log_artifact(path)
        logger.finish()
    except Exception as err:  # MLflow's own errors: the probe's files stand
        raise RuntimeError(f"{type(err).__name__}: {' '.join(str(err).split())[:160]}") from err
    return logger.run_id
