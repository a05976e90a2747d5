"""The prepared-corpus data pipeline at scale (issue 14). Generates its corpora in a temporary
folder and deletes them afterwards.

1. Peak RSS of a 5-step `gatesweep train` on a LARGE corpus minus that on a 10 MB corpus, first
   run (tokenizing into the cache) and cache hit; each run is its own process, its peak RSS read
   with wait4. Goal: <= 100 MB both times.
2. Tokens/s of `prepare` (what `gatesweep data prepare` runs) with GPT-2's BPE / tokens/s of HF
   `tokenizers`' own `encode_batch` on the same text in the same batches, alternating rounds.
   Goal: >= 0.7.
3. Data set-up of a second trial on the prepared LARGE corpus (`build_trial_data`, cache hit),
   in a fresh process. Goal: <= 1 s.

    python benchmarks/data_pipeline.py [--large-mb 1000] [--bpe-mb 40] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))

from common import result

ROOT = Path(__file__).resolve().parents[1]
WORDS = (
    "the of and to in a is that for it as was with be by on not he this are or his from at which but have an they you were "
    "their one all we can her has there been if more when will would who so no attention gate sink sigmoid token layer head"
).split()


def write_corpus(folder: Path, megabytes: float, files: int) -> Path:
    """`files` text files of random word lines, `megabytes` MB in all (a FineWeb-like folder of shards)."""
    import numpy as np

    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    per_file = int(megabytes * 1e6 / files)
    for k in range(files):
        with open(folder / f"shard-{k:05d}.txt", "w") as fh:
            written = 0
            while written < per_file:
                words = rng.choice(WORDS, size=200_000)
                lines = [" ".join(words[i : i + 14]) for i in range(0, len(words), 14)]
                block = "\n".join(lines) + "\n\n"
                fh.write(block[: per_file - written])
                written += min(len(block), per_file - written)
    return folder


def train_peak_rss(source: Path, cache: Path, workdir: Path) -> tuple[float, float]:
    """(peak RSS in MB, seconds) of one 5-step `gatesweep train` process on `source`."""
    cfg = workdir / "t.yaml"
    cfg.write_text(
        json.dumps(
            {
                "model": {"size": "tiny"},
                "data": {"source": str(source), "tokenizer": "byte", "seq_len": 128},
                "train": {"steps": 5, "batch_size": 8, "eval_every": 0, "log_every": 5, "checkpoint_every": 0, "warmup_steps": 1},
                "eval": {"batches": 1, "batch_size": 4, "probe_sequences": 4},
                "tracking": {"experiment": "rss"},
            }
        )
    )
    env = {**os.environ, "GATESWEEP_CACHE": str(cache)}
    cmd = [sys.executable, "-m", "orchestrator.cli", "train", str(cfg), "--fresh", "--runs-dir", str(workdir / "runs")]
    cmd += ["--tracking-uri", f"sqlite:///{workdir / 'mlflow.db'}"]
    t0 = time.perf_counter()
    with open(workdir / "train.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    if status != 0:
        raise SystemExit(f"gatesweep train failed on {source}: {(workdir / 'train.log').read_text()[-2000:]}")
    return usage.ru_maxrss / 1024, seconds


def tokenization_ratio(text_dir: Path, cache: Path, rounds: int) -> tuple[float, float, float]:
    """(prepare tokens/s / encode_batch tokens/s, prepare M tokens/s, encode_batch M tokens/s), rounds alternating."""
    os.environ["GATESWEEP_CACHE"] = str(cache)
    from orchestrator.data.documents import split_pieces
    from orchestrator.data.prepare import BATCH_CHARS, DataSettings, prepare
    from orchestrator.data.tokenizers import gpt2_tokenizer

    tok = gpt2_tokenizer()
    batches, batch, size = [], [], 0
    for p in split_pieces(str(text_dir), val_fraction=0.05):
        batch.append(p.text)
        size += len(p.text)
        if size >= BATCH_CHARS:
            batches.append(batch)
            batch, size = [], 0
    batches.append(batch)

    def ours() -> tuple[int, float]:
        shutil.rmtree(cache / "tokens", ignore_errors=True)
        t0 = time.perf_counter()
        prepared = prepare(DataSettings(str(text_dir), "gpt2"), tok, say=lambda m: None)
        splits = prepared.meta["splits"]
        return splits["train"]["tokens"] + splits["val"]["tokens"], time.perf_counter() - t0

    def theirs() -> tuple[int, float]:
        t0 = time.perf_counter()
        n = sum(len(e.ids) for b in batches for e in tok.hf.encode_batch(b))
        return n, time.perf_counter() - t0

    ratios, ours_rate, theirs_rate = [], [], []
    for r in range(rounds):
        pair = {}
        for name, fn in (("ours", ours), ("theirs", theirs)) if r % 2 == 0 else (("theirs", theirs), ("ours", ours)):
            n, s = fn()
            pair[name] = n / s
        ratios.append(pair["ours"] / pair["theirs"])
        ours_rate.append(pair["ours"] / 1e6)
        theirs_rate.append(pair["theirs"] / 1e6)
    return statistics.median(ratios), statistics.median(ours_rate), statistics.median(theirs_rate)


def setup_seconds(source: Path, cache: Path) -> float:
    code = (
        "import time\n"
        "from orchestrator.spec.data import DataConfig\n"
        "from orchestrator.data import build_trial_data\n"
        "import orchestrator.data.text  # a trial has torch and the data modules imported before it builds its data\n"
        f"cfg = DataConfig(source={str(source)!r}, tokenizer='byte', seq_len=128)\n"
        "t0 = time.perf_counter(); d = build_trial_data(cfg, seed=1); d.train_batch(0, 8); d.val_batches(1, 8)\n"
        "assert not d.prepared.fresh\n"
        "print(time.perf_counter() - t0)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "GATESWEEP_CACHE": str(cache)}, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(out.stderr[-2000:])
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--large-mb", type=float, default=1000)
    p.add_argument("--bpe-mb", type=float, default=40)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    with tempfile.TemporaryDirectory(prefix="gatesweep-data-bench-") as tmp:
        tmp = Path(tmp)
        small = write_corpus(tmp / "small", 10, 1)
        large = write_corpus(tmp / "large", args.large_mb, 8)
        print(f"corpora: 10 MB and {args.large_mb:g} MB ({sum(f.stat().st_size for f in large.iterdir()) / 1e6:.0f} MB on disk)")
        cache = tmp / "cache"
        rss = {}
        for label in ("first run", "cache hit"):
            for name, src in (("small", small), ("large", large)):
                rss[(label, name)] = train_peak_rss(src, cache, tmp)
            delta = rss[(label, "large")][0] - rss[(label, "small")][0]
            print(
                f"peak RSS, {label}: {rss[(label, 'large')][0]:.0f} MB on {args.large_mb:g} MB ({rss[(label, 'large')][1]:.0f} s), "
                f"{rss[(label, 'small')][0]:.0f} MB on 10 MB ({rss[(label, 'small')][1]:.0f} s)"
            )
            result(f"peak RSS, {args.large_mb:g} MB corpus minus 10 MB, {label}", round(delta, 1), "<= 100", delta <= 100, "MB")
        seconds = setup_seconds(large, cache)
        result(f"second trial's data set-up, prepared {args.large_mb:g} MB corpus", round(seconds, 3), "<= 1", seconds <= 1, "s")
        shutil.rmtree(large)
        bpe_text = write_corpus(tmp / "bpe", args.bpe_mb, 4)
        ratio, ours, theirs = tokenization_ratio(bpe_text, tmp / "cache-bpe", args.rounds)
        print(f"GPT-2 BPE on {args.bpe_mb:g} MB: prepare {ours:.2f} M tokens/s, encode_batch alone {theirs:.2f} M tokens/s")
        result("tokenization: prepare / encode_batch (GPT-2 BPE, 2 cores)", round(ratio, 3), ">= 0.7", ratio >= 0.7)


if __name__ == "__main__":
    main()
