"""The prepared-corpus pipeline (issue 14): documents -> pieces and split -> token shards -> windows.

Exact windows and targets on hand-made corpora, determinism and resume, disjoint ranks, concurrent
builders, the shard format, a multi-file parquet folder, and every bad input named in the issue."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from orchestrator.data import DataUnavailable, build_trial_data
from orchestrator.data.documents import PIECE_CHARS, split_pieces
from orchestrator.data.prepare import DataSettings, prepare
from orchestrator.data.shards import ShardWriter, TokenStream, token_dtype
from orchestrator.data.shuffle import permute
from orchestrator.data.text import TextData
from orchestrator.spec.data import DataConfig

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GATESWEEP_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def folder_of_docs(root: Path, docs: list[str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i, d in enumerate(docs):
        (root / f"doc{i:02d}.txt").write_text(d)
    return root


# ---- windows and targets -------------------------------------------------------------------
def test_stream_is_documents_joined_by_the_separator_and_the_split_is_every_kth_document(tmp_path, cache):
    docs = [f"document {i:02d} " + "abc" * i for i in range(10)]
    src = folder_of_docs(tmp_path / "docs", docs)
    p = prepare(DataSettings(str(src), "byte", val_fraction=0.25))
    # pieces 3 and 7 (floor((u+1)/4) > floor(u/4)) are held out
    held = [docs[3], docs[7]]
    kept = [d for i, d in enumerate(docs) if i not in (3, 7)]
    train = bytes(p.stream("train").read(0, len(p.stream("train"))).astype(np.uint8)).decode()
    val = bytes(p.stream("val").read(0, len(p.stream("val"))).astype(np.uint8)).decode()
    assert train == "\n\n".join(kept) and val == "\n\n".join(held)
    assert p.meta["documents"] == 10 and p.meta["splits"]["val"]["documents"] == 2
    assert p.meta["dtype"] == "<u2"
    # windows: BOS + consecutive seq_len-token slices of the stream; the target of position t is token t+1
    data = TextData(p.stream("train"), p.stream("val"), seq_len=8, tokenizer=p.tokenizer, seed=0)
    stream = p.stream("train").read(0, len(p.stream("train")))
    w = data.train_windows(0, 4)
    batch = data.train_batch(0, 4)
    for row, j in zip(batch, w):
        assert row[0] == 256 and row[1:].tolist() == stream[j * 8 : (j + 1) * 8].tolist()
    assert data.n_train == len(stream) // 8


def test_gpt2_separator_is_end_of_text_and_the_split_is_the_same_text_for_every_tokenizer(tmp_path, cache):
    docs = ["alpha beta gamma. " * 40, "delta epsilon. " * 30, "zeta eta theta. " * 50, "iota kappa. " * 20]
    src = str(folder_of_docs(tmp_path / "d", docs))
    byte = prepare(DataSettings(src, "byte", val_fraction=0.5))
    gpt2 = prepare(DataSettings(src, "gpt2", val_fraction=0.5))
    val_ids = gpt2.stream("val").read(0, len(gpt2.stream("val")))
    assert 50256 in val_ids.tolist(), "gpt2 joins documents with <|endoftext|>"
    gpt2_text = gpt2.tokenizer.hf.decode(val_ids.tolist(), skip_special_tokens=False).replace("<|endoftext|>", "\n\n")
    byte_text = bytes(byte.stream("val").read(0, len(byte.stream("val"))).astype(np.uint8)).decode()
    assert gpt2_text == byte_text == docs[1] + "\n\n" + docs[3]


def test_long_documents_are_cut_at_line_breaks_so_one_file_still_has_a_held_out_split(tmp_path):
    line = "x" * 99 + "\n"
    f = tmp_path / "one.txt"
    f.write_text(line * 2000)  # 200,000 characters in one document
    pieces = list(split_pieces(str(f), val_fraction=0.1))
    assert all(len(p.text) <= PIECE_CHARS and p.text.endswith("\n") for p in pieces)
    assert "".join(p.text for p in pieces) == line * 2000
    assert sum(p.held_out for p in pieces) == len(pieces) // 10 >= 1
    assert {p.doc for p in pieces} == {0}


def test_crlf_split_across_read_blocks_and_multibyte_characters(tmp_path, monkeypatch):
    import orchestrator.data.documents as documents

    monkeypatch.setattr(documents, "READ_CHARS", 7)  # blocks end inside CRLFs and inside UTF-8 characters
    text = "héllo wörld ✓\r\n" * 2500  # 37,500 characters: three pieces
    f = tmp_path / "crlf.txt"
    f.write_bytes(text.encode())
    pieces = list(split_pieces(str(f), val_fraction=0.5))
    assert len(pieces) == 3 and "".join(p.text for p in pieces) == text.replace("\r\n", "\n")


def test_max_chars_caps_what_is_read(tmp_path):
    f = tmp_path / "a.txt"
    f.write_text("abcdefghij\n" * 10_000)
    pieces = list(split_pieces(str(f), val_fraction=0.5, max_chars=30_000))
    assert sum(len(p.text) for p in pieces) == 30_000 and any(p.held_out for p in pieces)


# ---- determinism, resume, ranks ------------------------------------------------------------------
def test_batches_are_a_pure_function_of_seed_step_rank_and_world(cache):
    cfg = DataConfig(source="kjv", seq_len=64, max_chars=400_000)
    a, b = build_trial_data(cfg, seed=1), build_trial_data(cfg, seed=1)  # b: a "resumed" trial, from the cache
    assert not a.prepared.fresh or not b.prepared.fresh
    assert b.prepared.folder == a.prepared.folder
    for step in (0, 7, 10_000):  # 10,000 steps of 8 is past the first epoch
        assert torch.equal(a.train_batch(step, 8), b.train_batch(step, 8))
    assert not torch.equal(a.train_batch(0, 8), build_trial_data(cfg, seed=2).train_batch(0, 8))
    ranks = [a.train_windows(5, 8, rank=r, world=4) for r in range(4)]
    assert len(set(np.concatenate(ranks).tolist())) == 32, "ranks of one step read disjoint windows"
    assert np.array_equal(np.concatenate(ranks), np.concatenate([a.train_windows(20 + r, 8) for r in range(4)]))
    assert all(torch.equal(x, y) for x, y in zip(a.val_batches(3, 4), build_trial_data(cfg, seed=9).val_batches(3, 4)))


def test_an_epoch_visits_every_window_once_and_epochs_differ():
    n = 1037
    for key in (0, 1, 2**61 + 5):
        p = permute(np.arange(n), n, key)
        assert sorted(p.tolist()) == list(range(n))
    assert not np.array_equal(permute(np.arange(n), n, 1), permute(np.arange(n), n, 2))
    with pytest.raises(ValueError):
        permute(np.array([n]), n, 0)


def test_a_trial_reads_its_corpus_through_memory_maps(cache):
    data = build_trial_data(DataConfig(source="shakespeare", seq_len=32), seed=0)
    assert all(isinstance(p, np.memmap) for p in data.train.parts + data.val.parts)


# ---- the shard format --------------------------------------------------------------------------
@pytest.mark.parametrize("vocab", [257, 70_000])
def test_shards_round_trip_across_file_boundaries(tmp_path, vocab):
    dtype = token_dtype(vocab)
    assert dtype == (np.dtype("<u2") if vocab <= 65536 else np.dtype("<u4"))
    ids = np.random.default_rng(0).integers(0, vocab, size=1000)
    w = ShardWriter(tmp_path, "train", dtype, shard_tokens=128)
    for chunk in np.array_split(ids, 7):
        w.write(chunk)
    info = w.close()
    assert len(info["shards"]) == 8 and info["tokens"] == 1000
    stream = TokenStream.open(tmp_path, info, dtype)
    assert np.array_equal(stream.read(0, 1000), ids)
    assert np.array_equal(stream.read(120, 20), ids[120:140])  # crosses the first file boundary
    with pytest.raises(IndexError):
        stream.read(990, 20)
    with pytest.raises(ValueError, match="does not fit"):
        ShardWriter(tmp_path, "x", np.dtype("<u2")).write(np.array([70_000]))


def test_a_damaged_entry_is_rebuilt(tmp_path, cache, capfd):
    src = folder_of_docs(tmp_path / "d", [f"doc {i} " * 50 for i in range(8)])
    first = prepare(DataSettings(str(src), "byte", 0.25))
    shard = first.folder / first.meta["splits"]["train"]["shards"][0][0]
    want = shard.read_bytes()
    shard.write_bytes(want[:10])  # truncated
    again = prepare(DataSettings(str(src), "byte", 0.25))
    assert again.fresh and shard.read_bytes() == want
    assert "is damaged" in capfd.readouterr().err
    (first.folder / "meta.json").write_text("{not json")
    assert prepare(DataSettings(str(src), "byte", 0.25)).fresh
    leftover = first.folder.with_name(f".{first.folder.name}.424242.0badf00d.tmp")  # the staging folder of a builder killed outright
    leftover.mkdir()
    (first.folder / "meta.json").unlink()
    prepare(DataSettings(str(src), "byte", 0.25))
    assert not leftover.exists()


def test_a_multi_file_parquet_folder(tmp_path, cache):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "pq"
    folder.mkdir()
    rows = [f"row {i}: " + "lorem ipsum " * (i % 7 + 1) for i in range(300)]
    for k in range(3):
        pq.write_table(pa.table({"content": rows[k * 100 : (k + 1) * 100], "id": list(range(100))}), folder / f"part-{k:05d}.parquet")
    p = prepare(DataSettings(str(folder), "byte", 0.1, text_column="content"))
    assert p.meta["documents"] == 300 and p.meta["splits"]["val"]["documents"] == 30
    text = bytes(p.stream("train").read(0, len(p.stream("train"))).astype(np.uint8)).decode()
    assert text.startswith(rows[0] + "\n\n" + rows[1]) and text.endswith(rows[298])
    with pytest.raises(DataUnavailable, match="no column 'text'.*content"):
        prepare(DataSettings(str(folder), "byte", 0.1))


# ---- concurrency ----------------------------------------------------------------------------------
def _prepare_in_child(src: str, cache: str, out) -> None:
    os.environ["GATESWEEP_CACHE"] = cache
    p = prepare(DataSettings(src, "byte", 0.1), say=lambda m: None)
    out.put((p.fresh, str(p.folder), p.meta["built"]["at"], int(p.stream("train").read(0, 50).sum())))


@pytest.mark.slow
def test_concurrent_builders_of_one_corpus_build_it_once(tmp_path, cache):
    src = tmp_path / "big.txt"
    src.write_text("".join(f"line {i} of a corpus that takes a moment to tokenize\n" for i in range(200_000)))
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_prepare_in_child, args=(str(src), str(cache), out)) for _ in range(4)]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert sum(fresh for fresh, *_ in results) == 1, results
    assert len({r[1:] for r in results}) == 1, "every process reads the one corpus that was built"
    assert not list(cache.glob("tokens/*.tmp*"))


# ---- bad input: one line naming the source --------------------------------------------------
@pytest.mark.parametrize(
    "name, content, message",
    [
        ("empty.txt", b"", "no text"),
        ("blank.txt", b" \n\n\t \n", "no text"),
        ("binary.txt", bytes(range(256)) * 8, "not UTF-8 text (byte 128)"),
        ("nul.txt", b"hello\x00world\n" * 10, "contains NUL bytes"),
        ("cut.txt", "abc é".encode()[:-1], "ends inside a character"),
        ("one.txt", b"x", "one piece of text"),
        ("rows.jsonl", b'{"text": "a"}\n{"text": \n', "cannot be read"),
        ("bad.parquet", b"PAR1 this is not parquet", "cannot be read"),
    ],
)
def test_bad_files_are_refused_naming_the_file(tmp_path, cache, name, content, message):
    f = tmp_path / name
    f.write_bytes(content)
    with pytest.raises(DataUnavailable) as err:
        prepare(DataSettings(str(f), "byte", 0.05))
    assert message in str(err.value) and name in str(err.value)
    assert "\n" not in str(err.value)


def test_a_folder_without_text_and_mixed_folders(tmp_path, cache):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.bin").write_bytes(b"\x00")
    with pytest.raises(DataUnavailable, match="no .* files inside"):
        prepare(DataSettings(str(tmp_path / "empty"), "byte"))
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    (mixed / "a.txt").write_text("a")
    (mixed / "b.jsonl").write_text('{"text": "b"}\n')
    with pytest.raises(DataUnavailable, match="mixed file types"):
        prepare(DataSettings(str(mixed), "byte"))


def test_a_corpus_smaller_than_one_window(tmp_path, cache):
    src = folder_of_docs(tmp_path / "small", ["short line\n" * 3, "another\n"])
    with pytest.raises(DataUnavailable, match="cannot fill one window of data.seq_len=128"):
        build_trial_data(DataConfig(source=str(src), seq_len=128, val_fraction=0.5), seed=0)


def test_a_file_that_changes_while_it_is_read(tmp_path):
    f = tmp_path / "growing.txt"
    f.write_text("some text\n" * 5000)  # 50,000 characters: several pieces
    pieces = split_pieces(str(f), val_fraction=0.1)
    next(pieces)
    with open(f, "a") as fh:
        fh.write("appended while reading\n")
    with pytest.raises(DataUnavailable, match="growing.txt changed while it was read"):
        list(pieces)


def test_eos_separator_without_an_end_of_text_token(tmp_path, cache):
    src = folder_of_docs(tmp_path / "d", ["one " * 50, "two " * 50])
    with pytest.raises(DataUnavailable, match="has no end-of-text token"):
        prepare(DataSettings(str(src), "byte", 0.5, separator="eos"))
    p = prepare(DataSettings(str(src), "byte", 0.5, separator=" | "))
    text = bytes(p.stream("train").read(0, len(p.stream("train"))).astype(np.uint8)).decode()
    assert text == "one " * 50


@pytest.mark.slow
def test_data_prepare_command_and_listing(tmp_path):
    src = folder_of_docs(tmp_path / "d", [f"doc {i} " * 100 for i in range(20)])
    env = {**os.environ, "GATESWEEP_CACHE": str(tmp_path / "cache")}

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "orchestrator.cli", "data", *args], cwd=ROOT, env=env, capture_output=True, text=True)

    out = cli("prepare", str(src), "--tokenizer", "gpt2")
    assert out.returncode == 0, out.stderr
    assert "20 documents (prepared in" in out.stdout and "M tokens/s" in out.stdout
    assert "(cached:" in cli("prepare", str(src), "--tokenizer", "gpt2").stdout
    listing = cli().stdout
    assert "prepared corpora in" in listing and "gpt2" in listing and str(src) in listing
    bad = cli("prepare", str(tmp_path / "missing.txt"))
    assert bad.returncode == 2 and "--source: got" in bad.stderr and "Traceback" not in bad.stderr
    (tmp_path / "bin.txt").write_bytes(bytes(range(256)))
    bad = cli("prepare", str(tmp_path / "bin.txt"))
    assert bad.returncode == 2 and "bin.txt: not UTF-8 text" in bad.stderr and "Traceback" not in bad.stderr
    meta = json.loads(next((tmp_path / "cache" / "tokens").glob("*/meta.json")).read_text())
    assert meta["tokenizer"]["name"] == "gpt2" and meta["dtype"] == "<u2"


@pytest.mark.slow
def test_a_sweep_whose_corpus_cannot_fill_a_window_is_refused_before_launch(tmp_path):
    import yaml

    src = folder_of_docs(tmp_path / "small", ["short line\n" * 30, "another\n" * 20])
    sweep = tmp_path / "s.yaml"
    sweep.write_text(
        yaml.safe_dump(
            {
                "name": "small",
                "base": {"model": {"size": "tiny"}, "data": {"source": str(src), "val_fraction": 0.5}, "train": {"steps": 2}},
                "grid": {"data.seq_len": [16, 512]},
            }
        )
    )
    env = {**os.environ, "GATESWEEP_CACHE": str(tmp_path / "cache")}
    out = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "run", str(sweep), "--runs-dir", str(tmp_path / "runs")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert "1 data source(s) cannot be used" in out.stderr and "data.seq_len=512" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "runs").exists()


def test_a_builder_killed_mid_build_leaves_nothing_that_blocks_the_next(tmp_path, cache):
    """SIGKILL while tokenizing: the kernel drops the builder's lock, its temporary folder is
    removed by the next builder, and what that one builds equals an undisturbed build."""
    import signal
    import time

    src = tmp_path / "corpus.txt"
    src.write_text("".join(f"line {i} of a corpus read in tiny blocks\n" for i in range(60_000)))
    code = (
        "import orchestrator.data.documents as d\n"
        "d.READ_CHARS = 16  # tiny reads: a build that lasts long enough to be killed\n"
        "from orchestrator.data.prepare import DataSettings, prepare\n"
        f"prepare(DataSettings({str(src)!r}, 'byte', 0.1))\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "GATESWEEP_CACHE": str(cache)})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(cache.glob("tokens/*.tmp*")):
        assert child.poll() is None, "the builder finished before it could be killed"
        time.sleep(0.05)
    assert list(cache.glob("tokens/*.tmp*")), "the builder never started writing"
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    p = prepare(DataSettings(str(src), "byte", 0.1), say=lambda m: None)
    assert p.fresh and not list(cache.glob("tokens/*.tmp*"))
    text = bytes(p.stream("train").read(0, len(p.stream("train"))).astype(np.uint8)).decode()
    assert text == "".join(piece.text for piece in split_pieces(str(src), val_fraction=0.1) if not piece.held_out)
