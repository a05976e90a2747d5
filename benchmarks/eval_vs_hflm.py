"""gatesweep's evaluation side by side with lm-evaluation-harness's own Hugging Face backend (`HFLM`)
on the same weights: documents per second and per-document agreement.

Trains one `tiny` model (G1 elementwise gate by default, `--gate none` for an ungated one) on
Shakespeare with GPT-2's BPE for `--steps` steps (`gatesweep train`), exports it to a Hugging Face
folder (`gatesweep export`: Qwen3-Next's layout for G1, Qwen3's ungated), then builds the harness's
requests for each task once and answers the same requests with gatesweep's `GatesweepLM` (the
trained weights) and with `HFLM` (the export, loaded by transformers), in alternating rounds: each
round is a slice of the documents, and the order of the two flips every round. Both get the same
`--batch-size` and `max_length`; gatesweep batches up to `batch_size x max_len` tokens, HFLM by
rows. Prints documents per second for each (all rounds), the median of the per-round ratios, and
the agreement per document: the same chosen answer (argmax of the log-likelihoods, and of the
length-normalised ones) on multiple-choice documents, the same greedy flag on LAMBADA, the same
generated text on GSM8k (5-shot, 256 new tokens at most, stopping at "Question:").

"before": gatesweep's generation without the KV cache (`kv_cache=False`, the path of earlier
versions) and with it, on the first `--before-docs` GSM8k documents (one batch), alternating for
`--before-rounds` rounds. On a machine with CUDA both models run there (the GPU figures); else CPU.

    python benchmarks/eval_vs_hflm.py [--steps 200] [--docs 64] [--gen-docs 32] [--rounds 2] [--batch-size 16] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))

from common import result, table

LL_TASKS = ["hellaswag", "arc_easy", "piqa", "lambada_openai"]
GEN_TASK = "gsm8k"


def train_and_export(work: Path, steps: int, gate: str) -> tuple[Path, Path]:
    """A trained trial folder and its Hugging Face export, made by the CLI (reused when present)."""
    import yaml

    trial_cfg = {
        "model": {"size": "tiny", "gate": {"position": gate}},
        "data": {"source": "shakespeare", "tokenizer": "gpt2", "seq_len": 128},
        "train": {"steps": steps, "batch_size": 8, "lr": 3.0e-3, "warmup_steps": 20, "eval_every": 0, "log_every": 50},
        "eval": {"batches": 1, "batch_size": 8, "probe_sequences": 4},
    }
    hf = work / "hf"
    runs = work / "runs"
    found = sorted(runs.glob("train-*/model.pt"))
    if not found:
        (work / "trial.yaml").write_text(yaml.safe_dump(trial_cfg))
        cli = [sys.executable, "-m", "orchestrator.cli"]
        uri = f"sqlite:///{work / 'mlflow.db'}"
        t0 = time.perf_counter()
        subprocess.run([*cli, "train", str(work / "trial.yaml"), "--runs-dir", str(runs), "--tracking-uri", uri, "--quiet"], check=True)
        print(f"trained tiny {gate} for {steps} steps in {time.perf_counter() - t0:.0f} s")
        found = sorted(runs.glob("train-*/model.pt"))
    if not (hf / "config.json").exists():
        subprocess.run([sys.executable, "-m", "orchestrator.cli", "export", str(found[0].parent), "--out", str(hf), "--no-log"], check=True)
    return found[0].parent, hf


def build_requests(names: list[str], docs: int, gen_docs: int) -> dict[str, list]:
    """The harness's instances of each task (the first `docs` documents; `gen_docs` for GSM8k)."""
    from orchestrator.evals.harness import load_tasks

    out = {}
    for name in names:
        task = load_tasks([name], num_fewshot=5 if name == GEN_TASK else None)["tasks"][name]
        task.set_fewshot_seed(seed=1234)
        task.build_all_requests(limit=gen_docs if name == GEN_TASK else docs, rank=0, world_size=1)
        out[name] = list(task.instances)
    return out


def answer(lm, instances: list) -> list:
    """The LM's responses to `instances`, by request type, in instance order."""
    kind = instances[0].request_type
    return lm.generate_until(instances) if kind == "generate_until" else lm.loglikelihood(instances)


def by_doc(instances: list, responses: list) -> dict[int, list]:
    docs: dict[int, list] = defaultdict(list)
    for inst, resp in zip(instances, responses):
        docs[inst.doc_id].append((inst, resp))
    return docs


def _choices(ll: list[float], lens: list[int]) -> tuple[int, int]:
    """The harness's acc and acc_norm picks: argmax of the log-likelihoods, and of them per character."""
    return max(range(len(ll)), key=ll.__getitem__), max(range(len(ll)), key=lambda i: ll[i] / lens[i])


def agreement(instances: list, ours: list, theirs: list) -> tuple[int, int, float]:
    """Documents with the same answer, documents, and the largest |difference| of a log-likelihood."""
    same, worst = 0, 0.0
    a, b = by_doc(instances, ours), by_doc(instances, theirs)
    for doc_id, pairs in a.items():
        other = [r for _, r in b[doc_id]]
        mine = [r for _, r in pairs]
        if isinstance(mine[0], str):
            same += mine == other
            continue
        ll_a, ll_b = [r[0] for r in mine], [r[0] for r in other]
        worst = max(worst, *(abs(x - y) for x, y in zip(ll_a, ll_b)))
        if len(mine) == 1:  # LAMBADA: the greedy flag is the answer
            same += mine[0][1] == other[0][1]
            continue
        lens = [max(1, len(inst.args[1])) for inst, _ in pairs]
        same += _choices(ll_a, lens) == _choices(ll_b, lens)
    return same, len(a), worst


def side_by_side(name: str, instances: list, lms: dict, rounds: int) -> dict:
    """Alternating rounds over slices of the documents; seconds and responses per LM."""
    doc_ids = sorted({i.doc_id for i in instances})
    slices = [set(doc_ids[r::rounds]) for r in range(rounds)]
    seconds: dict[str, list[float]] = {k: [] for k in lms}
    responses: dict[str, dict[int, object]] = {k: {} for k in lms}
    for r, docs in enumerate(slices):
        part = [i for i in instances if i.doc_id in docs]
        order = list(lms) if r % 2 == 0 else list(reversed(lms))
        for label in order:
            t0 = time.perf_counter()
            out = answer(lms[label], part)
            seconds[label].append(time.perf_counter() - t0)
            responses[label].update({id(inst): resp for inst, resp in zip(part, out)})
        print(f"  {name} round {r + 1}/{rounds}: " + ", ".join(f"{k} {seconds[k][-1]:.1f} s" for k in lms), flush=True)
    ordered = {k: [responses[k][id(i)] for i in instances] for k in lms}
    return {"seconds": seconds, "responses": ordered, "docs": len(doc_ids), "per_round": [len(s) for s in slices]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=200, help="training steps of the tiny model")
    p.add_argument("--gate", default="G1", choices=["G1", "none"], help="G1 (exported as Qwen3-Next) or none (Qwen3)")
    p.add_argument("--docs", type=int, default=64, help="documents per loglikelihood task")
    p.add_argument("--gen-docs", type=int, default=32, help="GSM8k documents")
    p.add_argument("--before-docs", type=int, default=1, help="GSM8k documents timed on the uncached generation path, per round")
    p.add_argument("--rounds", type=int, default=2, help="alternating rounds (slices of the documents)")
    p.add_argument("--before-rounds", type=int, default=2, help="alternating rounds of the uncached / cached comparison")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-len", type=int, default=2048)
    p.add_argument("--workdir", help="keep the trained model and export here (reused by a later run)")
    p.add_argument("--tasks", default=",".join([*LL_TASKS, GEN_TASK]))
    args = p.parse_args()
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.workdir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        run(args, work)


def load_both(trial: Path, hf: Path, args, device: str) -> dict:
    import torch
    from lm_eval.models.huggingface import HFLM

    from gatedmodels import GatedTransformer
    from orchestrator.evals.harness import GatesweepLM
    from orchestrator.interop.locate import locate

    loaded = locate(str(trial))
    model = GatedTransformer(loaded.model_cfg)
    model.load_state_dict(loaded.state)
    model.to(device).eval()
    ours = GatesweepLM(model, loaded.tokenizer(), max_len=args.max_len, batch_size=args.batch_size)
    hflm = HFLM(
        pretrained=str(hf), backend="causal", batch_size=args.batch_size, max_length=args.max_len, device=device, dtype=torch.float32
    )
    return {"gatesweep": ours, "HFLM": hflm}


def run(args, work: Path) -> None:
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    where = torch.cuda.get_device_name(0) if device == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    trial, hf = train_and_export(work, args.steps, args.gate)
    lms = load_both(trial, hf, args, device)
    names = [t for t in args.tasks.split(",") if t]
    reqs = build_requests(names, args.docs, args.gen_docs)
    rows = []
    for name in names:
        res = side_by_side(name, reqs[name], lms, args.rounds)
        same, n, worst = agreement(reqs[name], res["responses"]["gatesweep"], res["responses"]["HFLM"])
        rate = {k: res["docs"] / sum(v) for k, v in res["seconds"].items()}
        ratio = statistics.median(h / g for g, h in zip(res["seconds"]["gatesweep"], res["seconds"]["HFLM"]))
        kind = reqs[name][0].request_type
        kind = "multiple_choice" if kind == "loglikelihood" and len(reqs[name]) > n else kind
        rows.append(
            {
                "task": name,
                "kind": kind,
                "docs": n,
                "gatesweep docs/s": f"{rate['gatesweep']:.2f}",
                "HFLM docs/s": f"{rate['HFLM']:.2f}",
                "gatesweep / HFLM": f"{ratio:.2f}",
                "agreement": f"{same}/{n}",
                "max |d loglik|": "" if kind == "generate_until" else f"{worst:.1e}",
            }
        )
        result(f"{name} ({kind}): gatesweep / HFLM documents per second ({where})", round(ratio, 2), ">= 1.0", ratio >= 1.0, "x")
        result(f"{name}: per-document agreement with HFLM", round(same / n, 4), "1.0", same == n)
    print(f"\n{args.gate} tiny model, {args.steps} steps; {where}; batch size {args.batch_size}, max_len {args.max_len}")
    print(table(rows, list(rows[0])))
    if GEN_TASK in names:
        before(reqs[GEN_TASK], lms["gatesweep"], args, where)


def before(instances: list, ours, args, where: str) -> None:
    """The uncached generation path against the cached one, on the same few GSM8k documents, in
    alternating rounds (the order flips every round); the median of the per-round ratios."""
    docs = sorted({i.doc_id for i in instances})[: args.before_docs]
    part = [i for i in instances if i.doc_id in docs]
    times: dict[bool, list[float]] = {True: [], False: []}
    texts: dict[bool, list[str]] = {}
    for r in range(args.before_rounds):
        for cache in (True, False) if r % 2 == 0 else (False, True):
            ours.kv_cache = cache
            t0 = time.perf_counter()
            texts[cache] = ours.generate_until(part)
            times[cache].append(time.perf_counter() - t0)
        print(
            f"  gsm8k before/after round {r + 1}/{args.before_rounds}: cached {times[True][-1]:.1f} s, uncached {times[False][-1]:.1f} s",
            flush=True,
        )
    ours.kv_cache = True
    same = sum(a == b for a, b in zip(texts[True], texts[False]))
    speedup = statistics.median(u / c for c, u in zip(times[True], times[False]))
    n = len(docs) * args.before_rounds
    print(
        f"GSM8k, {len(docs)} document(s) per batch, {args.before_rounds} rounds: uncached {n / sum(times[False]):.4f} docs/s, "
        f"cached {n / sum(times[True]):.3f} docs/s: {speedup:.1f}x (median of rounds); the same text on {same}/{len(docs)}"
    )
    result(f"gsm8k: cached / uncached generation, documents per second ({where})", round(speedup, 1), ">= 20", speedup >= 20, "x")


if __name__ == "__main__":
    main()
