"""Hostile cases on object-storage runs folders and caches, the sweep's own state files and the
logs, tried as a careful user (or a damaged store) would (issue 33): every one ends in one line
and exit status 2, or is survived, before anything is written where it should not be.

- a runs folder or cache that looks like a URI but is none a store backs (`s3:/b/p`, `s3a://`,
  `s3:b/p`, `gcs:/`, `scheme:rest`) is refused and never created as a local folder;
- an endpoint that answers HTML is refused naming it, before anything is saved;
- a checkpoint manifest, an S3 listing or a state file naming `..`, an absolute path or a link
  writes nothing outside its folder;
- a full disk under sweep.log is one warning line, never logging's traceback.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
from pathlib import Path

import pytest
import yaml

from orchestrator.storage import UnsafeName
from orchestrator.storage.location import Location
from tests.services.html_endpoint import HtmlEndpoint
from tests.support.cli import run_cli

ROOT = Path(__file__).resolve().parents[2]
LOOKALIKES = ["s3:/bucket/p", "s3a://bucket/p", "s3:bucket/p", "gcs:/bucket/p", "scheme:rest"]


def one_line(result: tuple[int, str, str], *needles: str) -> str:
    code, _, err = result
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("gatesweep: error: "), err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def tiny_trial(folder: Path) -> Path:
    f = folder / "trial.yaml"
    f.write_text(yaml.safe_dump({"model": {"size": "tiny"}, "data": {"source": "bigram-backcopy"}, "train": {"steps": 4}}))
    return f


def tiny_sweep(folder: Path, name: str = "hs") -> Path:
    f = folder / f"{name}.yaml"
    f.write_text(
        yaml.safe_dump({"name": name, "base": {"model": {"size": "tiny"}, "data": {"source": "bigram-backcopy"}, "train": {"steps": 4}}})
    )
    return f


def created(root: Path) -> list[str]:
    """What exists under `root` apart from the inputs the test wrote."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.suffix != ".yaml")


# ---- 1. URI lookalikes never become local folders --------------------------------------------------
@pytest.mark.parametrize("text", LOOKALIKES)
def test_train_with_a_runs_dir_that_looks_like_a_uri_is_refused_and_creates_nothing(text, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GATESWEEP_SCRATCH", str(tmp_path / "scratch"))
    config = tiny_trial(tmp_path)
    one_line(run_cli(capsys, "train", config, "--runs-dir", text, "--tracking-uri", f"sqlite:///{tmp_path}/m.db"), f"--runs-dir {text}")
    assert created(tmp_path) == [], "nothing written: no local folder named like the URI, no store, no scratch"


@pytest.mark.parametrize("command", ["run", "resume"])
def test_run_and_resume_with_a_lookalike_runs_dir_are_refused(command, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    target = tiny_sweep(tmp_path) if command == "run" else "hs"
    for text in ("s3a://bucket/runs", "s3:/bucket/runs"):
        line = one_line(run_cli(capsys, command, target, "--runs-dir", text, "--tracking-uri", f"sqlite:///{tmp_path}/m.db"), text)
        assert "did you mean s3://bucket/runs?" in line
    assert created(tmp_path) == []


@pytest.mark.parametrize("text", ["s3:/bucket/cache", "s3a://bucket/cache", "gcs:/b/c", "scheme:rest"])
def test_a_cache_that_looks_like_a_uri_is_refused_and_never_created(text, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GATESWEEP_CACHE", text)
    monkeypatch.setenv("GATESWEEP_SCRATCH", str(tmp_path / "scratch"))
    (tmp_path / "corpus.txt").write_text("to be or not to be " * 300)
    one_line(run_cli(capsys, "data", "prepare", tmp_path / "corpus.txt"), f"GATESWEEP_CACHE={text}: not a folder or an object-store URI")
    assert created(tmp_path) == ["corpus.txt"]


# ---- 2. an endpoint that answers HTML ----------------------------------------------------------------
@pytest.fixture
def html_store(monkeypatch, tmp_path):
    page = HtmlEndpoint().start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", page.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEEXAMPLE12")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-a-secret-at-all")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("GATESWEEP_SCRATCH", str(tmp_path / "scratch"))
    monkeypatch.chdir(tmp_path)
    yield page
    page.stop()


def test_train_into_an_endpoint_answering_html_is_refused_naming_it_before_anything_is_saved(html_store, tmp_path, capsys):
    config = tiny_trial(tmp_path)
    for extra in ([], ["--fresh"]):  # the old advice, --fresh, does not "train" into a store that keeps nothing
        line = one_line(
            run_cli(capsys, "train", config, "--runs-dir", "s3://bucket/runs", "--tracking-uri", f"sqlite:///{tmp_path}/m.db", *extra),
            html_store.endpoint,
            "does not answer as an S3 store",
        )
        assert "--runs-dir s3://bucket/runs" in line
    assert created(tmp_path) == [] and html_store.requests["PUT"] == 0


def test_run_resume_and_data_prepare_against_an_html_endpoint_are_refused(html_store, tmp_path, capsys, monkeypatch):
    sweep = tiny_sweep(tmp_path)
    one_line(
        run_cli(capsys, "run", sweep, "--runs-dir", "s3://bucket/runs", "--tracking-uri", f"sqlite:///{tmp_path}/m.db"), html_store.endpoint
    )
    one_line(run_cli(capsys, "resume", "hs", "--runs-dir", "s3://bucket/runs"), html_store.endpoint)
    monkeypatch.setenv("GATESWEEP_CACHE", "s3://bucket/cache")
    (tmp_path / "corpus.txt").write_text("to be or not to be " * 300)
    one_line(run_cli(capsys, "data", "prepare", tmp_path / "corpus.txt"), "GATESWEEP_CACHE=s3://bucket/cache", html_store.endpoint)
    assert created(tmp_path) == ["corpus.txt"] and html_store.requests["PUT"] == 0


# ---- 3. names a store gives stay inside their folder ------------------------------------------------
def checkpoints_on_the_store(tmp_path: Path) -> tuple[Path, Location]:
    from orchestrator.trial import checkpoint as ckpt

    work = tmp_path / "trainer"
    remote = Location.parse("s3://test-bucket/runs/sweeps/ck/trials/abc")
    for step in (10, 20):
        folder = ckpt.checkpoint_dir(work) / ckpt.tag(step)
        folder.mkdir(parents=True)
        (folder / "model_states.pt").write_bytes(os.urandom(2000) + bytes([step]))
        ckpt.mark_complete(work, step)
        ckpt.upload_checkpoint(work, remote, step)
    return work, remote


@pytest.mark.parametrize("name", ["../../../../H4ESCAPE.txt", "/tmp/H4ESCAPE-abs.txt", "sub/../../H4ESCAPE.txt"])
def test_a_checkpoint_manifest_naming_a_path_outside_writes_nothing_there(name, s3, tmp_path, monkeypatch):
    """The issue's case: the newest checkpoint's manifest names a file outside its folder, and
    the store holds an object at that very key; the resume writes nothing outside, says why, and
    resumes from the previous whole checkpoint."""
    import hashlib

    from orchestrator.trial import checkpoint as ckpt

    _, remote = checkpoints_on_the_store(tmp_path)
    payload = b"ESCAPED"
    key = "runs/sweeps/ck/trials/abc/checkpoints/step20/" + name.lstrip("/")
    for k in {key, posixpath.normpath(key), name.lstrip("/")}:  # as written, as a client may normalise it
        s3.client().put_object(Bucket="test-bucket", Key=k, Body=payload)
    marker = "runs/sweeps/ck/trials/abc/checkpoints/step20/COMPLETE"
    record = json.loads(s3.client().get_object(Bucket="test-bucket", Key=marker)["Body"].read())
    size, digest = len(payload), hashlib.sha256(payload).hexdigest()
    entry = next(iter(record["files"].values()))  # the entry's form (before the one manifest format: [size, sha256])
    record["files"][name] = [size, digest] if isinstance(entry, list) else {"size": size, "sha256": digest}
    s3.client().put_object(Bucket="test-bucket", Key=marker, Body=json.dumps(record).encode())
    node = tmp_path / "a" / "b" / "c" / "d" / "node"
    monkeypatch.chdir(tmp_path)
    said: list[str] = []
    assert ckpt.download_latest(remote, node, say=said.append) == "step10"
    assert said and "step20" in said[0] and "using the previous one" in said[0]
    assert not list(tmp_path.rglob("H4ESCAPE*")) and not Path("/tmp/H4ESCAPE-abs.txt").exists()


def test_a_store_listing_a_key_with_dotdot_parts_writes_nothing_outside(s3, tmp_path):
    """S3 keys may contain '..' parts: a key `p/../../evil` listed under `p` would land outside
    (the one place of this case: `Location.download`, under a trial's folder on the store)."""
    from orchestrator.trial import checkpoint as ckpt

    _, remote = checkpoints_on_the_store(tmp_path)
    s3.client().put_object(Bucket="test-bucket", Key="runs/sweeps/ck/trials/abc/artifacts/ok.txt", Body=b"ok")
    s3.client().put_object(Bucket="test-bucket", Key="runs/sweeps/ck/trials/abc/artifacts/../../../../../LISTED.txt", Body=b"x")
    with pytest.raises(UnsafeName):  # the listing names a file outside the folder it lists
        remote.child("artifacts").download(tmp_path / "a" / "b" / "c" / "art")
    assert not list(tmp_path.rglob("LISTED.txt"))
    assert ckpt.download_latest(remote, tmp_path / "node") == "step20"  # the checkpoints themselves are fine


def write_state(folder: Path, state: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "state.json").write_text(json.dumps(state))


def test_a_state_file_that_is_a_link_or_names_another_sweep_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "runs" / "sweeps" / "hs"
    other = tmp_path / "elsewhere.json"
    other.write_text(json.dumps({"name": "hs", "parent_run_id": "0" * 32, "trials": {}}))
    folder.mkdir(parents=True)
    (folder / "state.json").symlink_to(other)
    one_line(run_cli(capsys, "resume", "hs"), "state.json: damaged sweep state (a link")
    (folder / "state.json").unlink()
    write_state(folder, {"name": "other", "parent_run_id": "0" * 32, "trials": {}})
    one_line(run_cli(capsys, "resume", "hs"), "it names sweep 'other', not the folder's 'hs'")


def test_resume_reads_the_stored_sweep_file_never_a_path_the_state_names(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "decoy").mkdir()
    decoy = tiny_sweep(tmp_path / "decoy", "hs")
    write_state(tmp_path / "runs" / "sweeps" / "hs", {"name": "hs", "parent_run_id": "0" * 32, "trials": {}, "sweep_file": str(decoy)})
    one_line(run_cli(capsys, "resume", "hs"), "the stored copy of sweep 'hs' is missing")


def test_a_remote_state_naming_another_sweep_is_refused(s3, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GATESWEEP_SCRATCH", str(tmp_path / "scratch"))
    body = json.dumps({"name": "../../../escape", "parent_run_id": "0" * 32, "trials": {}}).encode()
    s3.client().put_object(Bucket="test-bucket", Key="runs/sweeps/hs/state.json", Body=body)
    s3.client().put_object(Bucket="test-bucket", Key="runs/sweeps/hs/sweep.yaml", Body=tiny_sweep(tmp_path).read_bytes())
    one_line(run_cli(capsys, "resume", "hs", "--runs-dir", "s3://test-bucket/runs"), "not the folder's 'hs'")
    assert not list(tmp_path.rglob("escape"))


def test_a_driver_lock_that_is_a_link_truncates_nothing(tmp_path):
    from orchestrator.core.errors import UserError
    from orchestrator.launch.lock import SweepLock

    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    folder = tmp_path / "runs" / "sweeps" / "hs"
    folder.mkdir(parents=True)
    (folder / "driver.lock").symlink_to(victim)
    with pytest.raises(UserError, match="driver lock cannot be taken"):
        SweepLock(Location.parse(folder), "hs").acquire()
    assert victim.read_text() == "precious"


def test_a_remote_run_json_far_too_large_is_refused_in_one_line(s3, tmp_path, capsys, monkeypatch):
    from orchestrator.spec.trial import TrialConfig

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GATESWEEP_SCRATCH", str(tmp_path / "scratch"))
    config = tiny_trial(tmp_path)
    h = TrialConfig.from_dict(yaml.safe_load(config.read_text())).config_hash()
    s3.client().put_object(Bucket="test-bucket", Key=f"runs/train-{h}/run.json", Body=b" " * (2 << 20))
    one_line(
        run_cli(capsys, "train", config, "--runs-dir", "s3://test-bucket/runs", "--tracking-uri", f"sqlite:///{tmp_path}/m.db"),
        "run.json: cannot be read",
        "more than",
    )


def test_a_run_dir_tag_that_leaves_its_prefix_is_not_followed(tmp_path, tracking_uri):
    from orchestrator.interop.errors import InteropError
    from orchestrator.interop.locate import _run_weights
    from orchestrator.tracking import client, names

    cl = client(tracking_uri)
    exp = cl.create_experiment("e")
    run = cl.create_run(exp, tags={names.RUN_DIR_TAG: "s3://bucket/runs/../../x"}).info.run_id
    with pytest.raises(InteropError, match="not a location"):
        _run_weights(run, tracking_uri)


# ---- 4. a full disk under sweep.log -----------------------------------------------------------------
def test_sweep_log_on_a_full_disk_is_one_warning_never_a_logging_traceback(tmp_path, capsys):
    """A real ENOSPC: sweep.log is /dev/full. Records are written, the file fails: one line says
    so, warnings reach the console, nothing raises, closing does not raise."""
    from orchestrator.launch.logfile import LOG_FILE, LibraryLog

    (tmp_path / LOG_FILE).symlink_to("/dev/full")
    with LibraryLog(names=("gatesweep-test-lib",), preload=()) as log:
        lib = logging.getLogger("gatesweep-test-lib")
        lib.setLevel(logging.DEBUG)
        lib.info("before the file")
        log.attach(tmp_path)
        for i in range(3):
            lib.warning("a warning %d", i)
            lib.info("chatter %d", i)
    err = capsys.readouterr().err
    assert "Logging error" not in err and "Traceback" not in err, err
    assert err.count("cannot be written (No space left on device)") == 1, err
    assert [line for line in err.splitlines() if "a warning" in line] == [
        line for line in err.splitlines() if "a warning" in line and "gatesweep-test-lib" in line
    ] and err.count("a warning") == 3
    assert "chatter" not in err


@pytest.mark.slow
def test_a_sweep_and_its_resume_with_sweep_log_on_a_full_disk(tmp_path):
    """The issue's case end to end: sweep.log cannot be written (a real ENOSPC: /dev/full); the
    sweep settles, `resume` runs to its end; one warning line each, no traceback."""
    import subprocess
    import sys
    import tempfile

    sweep = tiny_sweep(tmp_path)
    folder = tmp_path / "runs" / "sweeps" / "hs"
    folder.mkdir(parents=True)
    (folder / "sweep.log").symlink_to("/dev/full")
    ray_tmp = Path(tempfile.mkdtemp(prefix="gsfull", dir="/tmp"))
    env = {**os.environ, "RAY_TMPDIR": str(ray_tmp), "PYTHONPATH": str(ROOT)}
    uri = f"sqlite:///{tmp_path}/m.db"
    try:
        for args in (["run", str(sweep)], ["resume", "hs"]):
            done = subprocess.run(
                [sys.executable, "-m", "orchestrator.cli", *args, "--tracking-uri", uri],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            text = done.stdout + done.stderr
            assert done.returncode == 0, text[-3000:]
            assert "Traceback" not in text and "Logging error" not in text, text[-3000:]
            assert text.count("sweep.log: Ray's and MLflow's log lines cannot be written (No space left on device)") == 1, text[-3000:]
    finally:
        import shutil

        shutil.rmtree(ray_tmp, ignore_errors=True)
