"""Data: Bigram-Backcopy semantics and determinism, packing with BOS, offline corpora, tokenizers."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from orchestrator.data import BigramBackcopy, DataUnavailable, build_trial_data
from orchestrator.data.shards import TokenStream
from orchestrator.data.sources import load_corpus, strip_wiki_markup
from orchestrator.data.text import TextData
from orchestrator.data.tokenizers import byte_tokenizer, gpt2_tokenizer, train_bpe
from orchestrator.spec.data import BigramBackcopyConfig, DataConfig


@pytest.fixture(scope="module", params=["shakespeare", "dirichlet"])
def bbc(request):
    return BigramBackcopy(BigramBackcopyConfig(table=request.param), seq_len=48, train_seed=3)


def test_bigram_backcopy_follows_its_rules(bbc):
    x = bbc.train_batch(0, 64).numpy()
    assert x.shape == (64, 49)
    assert (x[:, 0] == bbc.bos_id).all() and (x[:, 1:] != bbc.bos_id).all()
    assert not bbc.is_trigger[x[:, 1]].any(), "the first token is never a trigger"
    prev, nxt, before = x[:, 2:-1], x[:, 3:], x[:, 1:-2]
    trig = bbc.is_trigger[prev]
    assert trig.mean() > 0.05
    assert (nxt[trig] == before[trig]).all(), "after a trigger comes the token before the trigger"
    # non-trigger transitions only use bigrams with non-zero probability
    assert (bbc.table[prev[~trig], nxt[~trig]] > 0).all()


def test_bigram_backcopy_is_deterministic_per_seed_and_step(bbc):
    assert torch.equal(bbc.train_batch(5, 8), bbc.train_batch(5, 8))
    assert not torch.equal(bbc.train_batch(5, 8), bbc.train_batch(6, 8))
    other = BigramBackcopy(bbc.cfg, seq_len=48, train_seed=4)
    assert not torch.equal(bbc.train_batch(5, 8), other.train_batch(5, 8))
    assert all(torch.equal(a, b) for a, b in zip(bbc.val_batches(2, 4), other.val_batches(2, 4))), "held-out set is shared by seeds"


def test_bigram_backcopy_metrics_on_the_true_model(bbc):
    """Logits equal to the true log-probabilities reach the optimal loss and copy perfectly."""
    seq = bbc.val_batches(1, 32)[0]
    x = seq.numpy()
    V = bbc.vocab_size
    logp = np.full((32, 48, V), -1e9)
    logp[:, 0, : V - 1] = np.log(np.maximum(bbc.first, 1e-300))
    for t in range(1, 48):
        prev = x[:, t]
        rows = np.log(np.maximum(bbc.table[prev], 1e-300))
        logp[:, t, : V - 1] = rows
        for b in np.nonzero(bbc.is_trigger[prev])[0]:
            logp[b, t, :] = -1e9
            logp[b, t, x[b, t - 1]] = 0.0
    m = bbc.task_metrics(torch.from_numpy(logp).float(), seq)
    assert m["bbc/copy_acc"] == 1.0
    assert m["bbc/trigger_loss"] == pytest.approx(0.0, abs=1e-6)
    nll = torch.nn.functional.cross_entropy(torch.from_numpy(logp).float().flatten(0, 1), seq[:, 1:].flatten())
    assert float(nll) == pytest.approx(m["bbc/optimal_loss"], rel=1e-4)


def test_text_windows_start_with_bos_and_split_is_disjoint():
    tok = byte_tokenizer()
    train = np.arange(1000, dtype=np.int32) % 250
    val = (np.arange(300, dtype=np.int32) % 7) + 250 - 7
    data = TextData(TokenStream([train]), TokenStream([val]), seq_len=10, tokenizer=tok, seed=0)
    b = data.train_batch(0, 4)
    assert b.shape == (4, 11) and (b[:, 0] == 256).all()
    # an epoch visits every window exactly once
    seen = torch.cat([data.train_batch(s, 4)[:, 1:] for s in range(25)])
    assert sorted(map(tuple, seen.tolist())) == sorted(map(tuple, train.reshape(100, 10).tolist()))
    # ranks take disjoint slices of the same global batch
    r0, r1 = data.train_batch(3, 4, rank=0, world=2), data.train_batch(3, 4, rank=1, world=2)
    assert not set(map(tuple, r0.tolist())) & set(map(tuple, r1.tolist()))
    assert torch.equal(data.val_batches(2, 3)[0], data.val_batches(2, 3)[0])
    with pytest.raises(DataUnavailable, match="seq_len"):
        TextData(TokenStream([train[:5]]), TokenStream([val]), seq_len=10, tokenizer=tok, seed=0)


@pytest.mark.parametrize("source", ["shakespeare", "kjv", "wikipedia"])
def test_offline_corpora_load(source):
    docs = load_corpus(source)
    text = "".join(docs)
    assert len(text) > 1_000_000
    assert {"shakespeare": "Hamlet", "kjv": "In the beginning God created", "wikipedia": "Anarchism"}[source] in text
    if source == "wikipedia":
        assert "{{" not in text and "[[" not in text


def test_wiki_markup_stripping():
    raw = "'''Bold''' text with [[Link|label]] and {{cite|x={{nested}}}} <ref>r</ref>\n== Head ==\nend"
    assert strip_wiki_markup(raw) == "Bold text with label and  \nHead\nend"


def test_trial_data_from_corpus_and_local_files(tmp_path):
    data = build_trial_data(DataConfig(source="shakespeare", seq_len=32, max_chars=200_000), seed=0)
    assert data.vocab_size == 257 and data.train_batch(0, 2)[:, 0].eq(256).all()
    (tmp_path / "a.jsonl").write_text(('{"body": "hello world, this is a local file. ' + "x" * 500 + '"}\n') * 20)
    local = build_trial_data(DataConfig(source=str(tmp_path / "a.jsonl"), text_column="body", seq_len=16, val_fraction=0.2), seed=0)
    assert local.tokenizer.decode(local.val_batches(1, 1)[0][0].tolist())
    with pytest.raises(DataUnavailable, match="no column 'text'"):
        build_trial_data(DataConfig(source=str(tmp_path / "a.jsonl"), seq_len=16), seed=0)


def test_gpt2_tokenizer_matches_known_ids():
    tok = gpt2_tokenizer()
    assert tok.vocab_size == 50257 and tok.bos_id == 50256
    assert tok.encode(["Hello world"])[0].tolist() == [15496, 995]
    assert tok.token_bytes[995] == len(b" world")


def test_bpe_is_cached_by_content(tmp_path, monkeypatch):
    monkeypatch.setenv("GATESWEEP_CACHE", str(tmp_path))
    texts = ["the quick brown fox jumps over the lazy dog " * 50, "pack my box with five dozen liquor jugs " * 50]
    t0 = time.perf_counter()
    a = train_bpe(texts, 300)
    assert len(list((tmp_path / "tokenizers").glob("*.json"))) == 1
    b = train_bpe(texts, 300)
    assert a.encode(["the quick fox"])[0].tolist() == b.encode(["the quick fox"])[0].tolist()
    assert a.vocab_size <= 300 and a.bos_id == 0
    text = "the lazy dog"
    ids = a.encode([text])[0]
    assert int(a.token_bytes[ids].sum()) == len(text.encode())
    assert time.perf_counter() - t0 < 30


def test_hub_name_offline_fails_at_once_with_one_line():
    code = (
        "from orchestrator.spec.data import DataConfig\n"
        "from orchestrator.data import build_trial_data\n"
        "build_trial_data(DataConfig(source='hf:roneneldan/TinyStories'), 0)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "GATESWEEP_ONLINE"}
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert time.perf_counter() - t0 < 20
    assert out.returncode != 0
    assert "runs offline" in out.stderr and "GATESWEEP_ONLINE=1" in out.stderr
