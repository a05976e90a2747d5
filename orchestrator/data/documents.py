"""A text source as a stream of documents, read in bounded pieces, and the document-level split.

`read_source(source, ...)` yields `(doc, text)` pieces of at most `PIECE_CHARS` characters, cut
at line breaks; pieces of one document share its index `doc` and come in order. Nothing holds
more than one batch of rows or one read buffer, whatever the corpus size:

- local `.txt/.text/.md` files are read in 1 MiB blocks, one document per file (HF's `text`
  builder would hold a whole-file document in memory, or split a book into paragraph documents);
- local `.jsonl/.json/.parquet/.csv` files and `hf:NAME[:CONFIG]` are streamed by HF `datasets`
  (`streaming=True`), one document per row;
- the offline corpora are a few MB and loaded whole (`sources.OFFLINE_CORPORA`).

The held-out split is made of *pieces*: piece u (counted over the whole source) is held out when
floor((u+1)·f) > floor(u·f), f = `val_fraction` -- every (1/f)-th piece, an exact share spread over
the corpus -- and, when that gives none, the last piece. Documents up to `PIECE_CHARS` (almost all
web documents and Wikipedia articles) are whole pieces, so the split is by documents; a longer
document (a book, a one-file corpus) is divided at line breaks, so a corpus of a few long documents
still has a held-out share. The split is text, decided before tokenization: identical for every
tokenizer and every trial.
"""

from __future__ import annotations

import codecs
import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .sources import CORPUS_PACKAGES, LOCAL_SUFFIXES, OFFLINE_CORPORA, ONLINE_ENV, DataUnavailable, _datasets, online, package_dir

PIECE_CHARS = 16_384
READ_CHARS = 1 << 20
ROWS_PER_BATCH = 1_000
TEXT_SUFFIXES = (".txt", ".text", ".md")
_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}


def local_files(path: Path) -> list[Path]:
    """The data files of a local source: the file itself, or a folder's regular files with a data
    suffix, sorted, each file once (`distinct_files`)."""
    if path.is_dir():
        return distinct_files(sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in LOCAL_SUFFIXES))
    return [path]


def distinct_files(files: list[Path]) -> list[Path]:
    """`files` with every file once, the first path kept: a file reachable twice (a symlink or a
    hard link beside it) or present twice (a copy, the same bytes) would be two documents, one of
    them possibly held out while the other trains, so the held-out text would leak into training.
    Identity is the real file (device, inode); contents are compared only between files of equal size."""
    kept: list[Path] = []
    seen: set[tuple[int, int]] = set()
    by_size: dict[int, list[Path]] = {}
    digests: dict[Path, str] = {}

    def digest(p: Path) -> str:
        if p not in digests:
            h = hashlib.sha256()
            with open(p, "rb") as fh:
                while block := fh.read(READ_CHARS):
                    h.update(block)
            digests[p] = h.hexdigest()
        return digests[p]

    for p in files:
        st = p.stat()
        if (st.st_dev, st.st_ino) in seen:
            continue
        seen.add((st.st_dev, st.st_ino))
        same_size = by_size.setdefault(st.st_size, [])
        if any(digest(q) == digest(p) for q in same_size):
            continue
        same_size.append(p)
        kept.append(p)
    return kept


def file_stamps(files: list[Path]) -> list[list]:
    return [[str(p), p.stat().st_size, p.stat().st_mtime_ns] for p in files]


def source_fingerprint(source: str, *, hf_split: str = "train", text_column: str = "text") -> list:
    """What identifies a source's content, for cache keys: the offline corpus and its installed
    package folder, the Hub name and split, or every local file's path, size and mtime."""
    if source in OFFLINE_CORPORA:
        return [source, str(package_dir(CORPUS_PACKAGES[source]))]
    if source.startswith("hf:"):
        return [source, hf_split, text_column]
    return [file_stamps(local_files(Path(source).expanduser().resolve())), text_column]


def _cut(text: str, size: int = PIECE_CHARS) -> Iterator[str]:
    """`text` in pieces of at most `size` characters, cut after a line break where there is one."""
    start = 0
    while len(text) - start > size:
        end = text.rfind("\n", start, start + size)
        end = start + size if end < 0 else end + 1
        yield text[start:end]
        start = end
    if start < len(text):
        yield text[start:]


def _read_text_file(path: Path) -> Iterator[str]:
    """A UTF-8 text file in pieces (CRLF read as LF); a binary or non-UTF-8 file is refused with its offset."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    buf, offset = "", 0
    with open(path, "rb") as fh:
        while block := fh.read(READ_CHARS):
            try:
                text = decoder.decode(block)
            except UnicodeDecodeError as err:
                raise DataUnavailable(f"{path}: not UTF-8 text (byte {offset + err.start}); is it a binary file?") from None
            if "\x00" in text:
                raise DataUnavailable(f"{path}: contains NUL bytes (near byte {offset + text.index(chr(0))}); is it a binary file?")
            offset += len(block)
            buf += text
            keep = 1 if buf.endswith("\r") else 0  # the CR of a CRLF split across two blocks
            pieces = list(_cut(buf[: len(buf) - keep].replace("\r\n", "\n")))
            buf = pieces.pop() + buf[len(buf) - keep :] if pieces else buf
            yield from pieces
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise DataUnavailable(f"{path}: not UTF-8 text (it ends inside a character); is it a binary file?") from None
    yield from _cut(buf.replace("\r\n", "\n"))


def _rows(source: str, files: list[Path] | None, *, column: str, hf_split: str) -> Iterator[str]:
    """Rows' text from HF `datasets` in streaming mode: local structured files, or the Hub when `files` is None."""
    datasets = _datasets()
    try:
        if files is None:
            name, _, config = source[3:].partition(":")
            ds = datasets.load_dataset(name, config or None, split=hf_split, streaming=True)
        else:
            builder = _BUILDERS[files[0].suffix.lower()]
            ds = datasets.load_dataset(builder, data_files=[str(f) for f in files], split="train", streaming=True)
        for batch in ds.iter(batch_size=ROWS_PER_BATCH):
            if column not in batch:
                raise DataUnavailable(f"{source} has no column {column!r} (columns: {', '.join(batch)}); set data.text_column")
            yield from (t for t in batch[column] if isinstance(t, str))
    except DataUnavailable:
        raise
    except Exception as err:  # pyarrow and the Hub raise many types; the user needs one line
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise DataUnavailable(f"{source}: cannot be read ({type(err).__name__}: {first[:300]})") from None


def _documents(source: str, *, text_column: str, hf_split: str) -> tuple[Iterable[Iterable[str]], list[Path] | None]:
    """The source's documents, each an iterable of text pieces, and the local files read (if any)."""
    if source in OFFLINE_CORPORA:
        return ([doc] for doc in OFFLINE_CORPORA[source]()), None
    if source.startswith("hf:"):
        if not online():
            raise DataUnavailable(
                f"{source} needs the Hugging Face Hub, but gatesweep runs offline; set {ONLINE_ENV}=1 on a machine "
                f"with network access, or use a local file or an offline corpus ({', '.join(OFFLINE_CORPORA)})"
            )
        return ([row] for row in _rows(source, None, column=text_column, hf_split=hf_split)), None
    path = Path(source).expanduser().resolve()
    files = local_files(path)
    if not files:
        raise DataUnavailable(f"{path}: no {', '.join(LOCAL_SUFFIXES)} files inside")
    suffixes = {p.suffix.lower() for p in files}
    if len(suffixes) > 1:
        raise DataUnavailable(f"{path}: mixed file types {sorted(suffixes)}; use one kind per folder")
    if suffixes.pop() in TEXT_SUFFIXES:
        return (_read_text_file(f) for f in files), files
    return ([row] for row in _rows(str(path), files, column=text_column, hf_split=hf_split)), files


@dataclass
class Piece:
    doc: int
    """Index of the document the piece belongs to."""
    text: str
    held_out: bool


def is_held_out(u: int, val_fraction: float) -> bool:
    return int((u + 1) * val_fraction) > int(u * val_fraction)


def _pieces(docs: Iterable[Iterable[str]]) -> Iterator[tuple[int, str]]:
    for d, doc in enumerate(docs):
        for raw in doc:
            for text in _cut(raw):
                if text.strip():
                    yield d, text


def split_pieces(
    source: str, *, val_fraction: float, text_column: str = "text", hf_split: str = "train", max_chars: int | None = None
) -> Iterator[Piece]:
    """Every piece of the source with its split, in source order (see the module docstring); at
    most `max_chars` characters. A local file that changes while it is read is refused, as is a
    source without text. The last piece is held back one step, to hold it out if nothing else was."""
    docs, files = _documents(source, text_column=text_column, hf_split=hf_split)
    stamps = file_stamps(files) if files else None
    u, chars, last, any_held_out = 0, 0, None, False
    for d, text in _pieces(docs):
        if max_chars is not None:
            text = text[: max_chars - chars]
        if last is not None:
            yield last
        held = is_held_out(u, val_fraction)
        any_held_out |= held
        last, u, chars = Piece(d, text, held), u + 1, chars + len(text)
        if max_chars is not None and chars >= max_chars:
            break
    if last is None:
        raise DataUnavailable(f"{source}: no text (0 non-empty documents)")
    if stamps is not None and file_stamps(files) != stamps:
        changed = next(s[0] for s, t in zip(stamps, file_stamps(files)) if s != t)
        raise DataUnavailable(f"{source}: {changed} changed while it was read; prepare the data again once it is complete")
    if not any_held_out:
        if u < 2:
            raise DataUnavailable(f"{source}: one piece of text ({chars} characters) cannot be split into training and held-out text")
        last.held_out = True
    yield last
