"""The hostile corpus of the commands added last (issue 25): `export`, `import`, `probe`, `eval`,
`data`, and the same faults looked for in `report`, `ui`, `resume`, `train`, `plan`, `validate`.

One case per class of the issue (destructive `--out`, weights scored in the wrong run, NaN read as
sink-free, held-out text leaking into training, memory bombs, signals and a full disk at the end of
a sweep, listeners widened from the environment, tracebacks and wrong reasons, terminal and
markdown injection, oversubscription, a retry that loops on permanent errors, validate and plan
disagreeing), then cases nobody had tried. Each ends in one line and exit 2 (or the documented
warning), with nothing deleted, written or read that should not be. The commands run in-process
against real files, real safetensors, a real SQLite MLflow store and the real filesystem (FIFOs,
devices, symlinks, sparse files); the few that start processes are marked slow.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import signal
import socket
import sqlite3
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from gatedmodels import GatedTransformer, ModelConfig
from tests.support.cli import run_cli

ROOT = Path(__file__).resolve().parents[2]
V = 65  # bigram-backcopy's default 64 tokens + BOS
BASE = dict(vocab_size=V, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, ffn_dim=48, max_seq_len=256, init_std=0.2)
RUN_A, RUN_B = "a" * 32, "b" * 32


# ---- helpers ---------------------------------------------------------------------------------------
def one_line(result: tuple[int, str, str], *needles: str) -> str:
    code, _, err = result
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("gatesweep: error: "), err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@contextlib.contextmanager
def within(seconds: int):
    """Fail instead of hanging: a FIFO read or a device read forever would block the test."""

    def late(signum, frame):
        raise AssertionError(f"still running after {seconds} s (blocked on a read?)")

    previous = signal.signal(signal.SIGALRM, late)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def model(vocab: int = V, seed: int = 0, **kw) -> GatedTransformer:
    torch.manual_seed(seed)
    return GatedTransformer(ModelConfig.from_dict({**BASE, "vocab_size": vocab, **kw})).eval()


def trial_dir(folder: Path, net: GatedTransformer | None = None, *, run_id: str | None = None, run_json=None, state=None) -> Path:
    """A finished trial's folder: model.pt (weights, trial config, the run it was trained under) and run.json."""
    net = net or model()
    folder.mkdir(parents=True, exist_ok=True)
    trial = {"model": net.cfg.to_dict(), "data": {"source": "bigram-backcopy", "seq_len": 32}}
    blob = {"model": state if state is not None else {k: v.clone() for k, v in net.state_dict().items()}, "config": trial}
    if run_id:
        blob["run_id"] = run_id
    torch.save(blob, folder / "model.pt")
    if run_json is not None:
        (folder / "run.json").write_text(run_json if isinstance(run_json, str) else json.dumps(run_json))
    return folder


def hf_dir(folder: Path, tmp: Path, vocab: int = 320) -> Path:
    """A Hugging Face Qwen3 folder (written by gatesweep export, read back), with a tokenizer.json."""
    from orchestrator.interop.export import export
    from orchestrator.interop.locate import locate
    from orchestrator.interop.tokenizer_files import byte_hf_tokenizer

    src = trial_dir(tmp / f"src-{folder.name}", model(vocab))
    export(locate(str(src)), folder, "hf", tokenizer=False)
    byte_hf_tokenizer().save(str(folder / "tokenizer.json"))
    return folder


def rewrite_safetensors(path: Path, extra: dict[str, tuple[str, list[int]]] | None = None, change=None) -> None:
    """Rewrite `path` with `change(name, tensor)` applied to its tensors and, appended, `extra`
    tensors of (dtype code, shape) whose data is a hole in a sparse file (no disk, no memory)."""
    from orchestrator.interop.weights_files import load_file, save_file

    tensors = load_file(path)
    if change is not None:
        tensors = {k: change(k, v) for k, v in tensors.items()}
    save_file(tensors, path, metadata={"format": "pt"})
    if not extra:
        return
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    data = raw[8 + n :]
    end = len(data)
    for name, (dtype, shape) in extra.items():
        size = math.prod(shape) * {"F32": 4, "F16": 2, "I32": 4}[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [end, end + size]}
        end += size
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)
        f.truncate(8 + len(text) + end)  # the hole: a 12 GiB tensor in a file that takes a few kB of disk


def rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


@pytest.fixture(scope="module")
def module_uri(tmp_path_factory):
    """One real SQLite MLflow store for the module (creating one costs seconds; each test makes its own runs)."""
    from orchestrator.tracking import client

    uri = f"sqlite:///{tmp_path_factory.mktemp('store') / 'mlflow.db'}"
    client(uri).search_experiments()
    return uri


@pytest.fixture
def store(module_uri):
    """Two fresh runs, A and B (a trial's run and a newer run of its folder), in the module's store."""
    from mlflow.tracking import MlflowClient

    cl = MlflowClient(module_uri)
    exp = cl.get_experiment_by_name("hostile") or cl.get_experiment(cl.create_experiment("hostile"))
    runs = [cl.create_run(exp.experiment_id, run_name=name).info.run_id for name in ("trained", "newer")]
    return module_uri, cl, runs


# ---- 1. destructive flags never delete what the command did not write ----------------------------------
def test_export_force_refuses_the_working_folder_and_deletes_nothing(tmp_path, capsys, monkeypatch):
    work = tmp_path / "project"
    (work / "runs" / "sweeps").mkdir(parents=True)
    (work / "notes.txt").write_text("mine")
    trial = trial_dir(work / "runs" / "t")
    monkeypatch.chdir(work)
    one_line(run_cli(capsys, "export", trial, "--out", ".", "--force", "--format", "gatesweep", "--no-tokenizer"), "is the working folder")
    one_line(
        run_cli(capsys, "export", trial, "--out", "..", "--force", "--format", "gatesweep", "--no-tokenizer"), "holds the working folder"
    )
    assert (work / "notes.txt").read_text() == "mine" and (work / "runs" / "sweeps").is_dir() and (trial / "model.pt").is_file()


@pytest.mark.parametrize("where", ["the trial folder", "its parent", "a symlink to it"])
def test_export_force_refuses_the_source_and_its_parents(tmp_path, capsys, where):
    trial = trial_dir(tmp_path / "runs" / "t", run_json={"run_id": RUN_A}, run_id=RUN_A)
    (trial / "checkpoints" / "step4").mkdir(parents=True)
    out = {"the trial folder": trial, "its parent": trial.parent, "a symlink to it": tmp_path / "link"}[where]
    if where == "a symlink to it":
        out.symlink_to(trial)
    one_line(run_cli(capsys, "export", trial, "--out", out, "--force", "--no-log", "--format", "gatesweep", "--no-tokenizer"), "the source")
    assert (trial / "model.pt").is_file() and (trial / "checkpoints" / "step4").is_dir()


def test_export_force_refuses_a_folder_gatesweep_did_not_write(tmp_path, capsys):
    trial = trial_dir(tmp_path / "t")
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("years of work")
    (out / "config.json").write_text("{}")  # a file an export would write, but not gatesweep's
    line = one_line(run_cli(capsys, "export", trial, "--out", out, "--force", "--format", "gatesweep", "--no-tokenizer"))
    assert "holds files gatesweep did not write (thesis.tex)" in line
    assert (out / "thesis.tex").read_text() == "years of work"


def test_export_force_replaces_a_previous_export_whole(tmp_path, capsys):
    trial = trial_dir(tmp_path / "t")
    out = tmp_path / "exp"
    code, _, err = run_cli(capsys, "export", trial, "--out", out, "--format", "gatesweep", "--no-tokenizer")
    assert code == 0, err
    assert {p.name for p in out.iterdir()} == {"config.yaml", "model.safetensors"}
    code, _, err = run_cli(capsys, "export", trial, "--out", out, "--force", "--no-tokenizer")  # now as HF: config.yaml must go
    assert code == 0, err
    assert {p.name for p in out.iterdir()} == {"config.json", "model.safetensors"}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".exp.")], "no temporary sibling left"


def test_import_refused_for_a_tokenizer_larger_than_the_vocabulary_leaves_nothing(tmp_path, capsys):
    from orchestrator.interop.tokenizer_files import byte_hf_tokenizer

    hf = hf_dir(tmp_path / "hf", tmp_path)
    big = byte_hf_tokenizer()
    big.add_tokens([f"tok{i}" for i in range(100)])  # 357 tokens, the model has 320
    big.save(str(tmp_path / "big.json"))
    out = tmp_path / "imp"
    one_line(
        run_cli(capsys, "import", hf, "--out", out, "--tokenizer", tmp_path / "big.json"),
        "357 tokens, more than the model's vocabulary (320)",
    )
    assert not out.exists(), "a refused import leaves no --out behind"
    code, _, err = run_cli(capsys, "import", hf, "--out", out, "--data", "shakespeare")  # the corrected command is not 'not empty'
    assert code == 0, err
    assert {p.name for p in out.iterdir()} == {"model.pt", "tokenizer.json", "config.yaml", "import.json"}
    assert torch.load(out / "model.pt", weights_only=True)["config"]["data"]["tokenizer"] == str(out.resolve() / "tokenizer.json")
    code, _, err = run_cli(capsys, "import", hf, "--out", out, "--force", "--data", "shakespeare")  # --force replaces an import
    assert code == 0, err
    one_line(run_cli(capsys, "import", hf, "--out", hf, "--force"), "is the source")


# ---- 2. every artifact knows whose it is ------------------------------------------------------------
def test_eval_refuses_weights_of_another_run_than_the_one_it_would_log_into(tmp_path, capsys, store):
    uri, cl, (trained, newer) = store
    # `train --fresh`: the new run's run.json at once, the previous run's model.pt until the new one ends
    trial = trial_dir(tmp_path / "t", run_id=trained, run_json={"run_id": newer})
    line = one_line(run_cli(capsys, "eval", trial, "--tasks", "length", "--tracking-uri", uri))
    assert f"trained under MLflow run {trained}, but run.json names run {newer}" in line
    assert cl.get_run(newer).data.metrics == {}, "nothing logged into the run that did not produce the weights"
    for command in (["export", trial, "--out", tmp_path / "o"], ["probe", trial, "--data", "bigram-backcopy", "--out", tmp_path / "p"]):
        one_line(run_cli(capsys, *command, "--tracking-uri", uri), f"trained under MLflow run {trained}")
    assert not (tmp_path / "o").exists() and not (tmp_path / "p").exists()


def test_a_run_id_whose_folder_holds_a_later_runs_weights_is_refused(tmp_path, capsys, store):
    uri, cl, (trained, newer) = store
    from orchestrator.tracking import names

    trial = trial_dir(tmp_path / "t", run_id=newer, run_json={"run_id": newer})
    cl.set_tag(trained, names.RUN_DIR_TAG, str(trial))
    line = one_line(run_cli(capsys, "eval", trained, "--tasks", "length", "--tracking-uri", uri))
    assert f"was trained under run {newer}, not this one" in line
    assert cl.get_run(trained).data.metrics == {}


def test_eval_logs_into_the_run_the_weights_were_trained_under(tmp_path, capsys, store):
    uri, cl, (trained, _) = store
    trial = trial_dir(tmp_path / "t", run_id=trained, run_json={"run_id": trained})
    code, out, err = run_cli(capsys, "eval", trial, "--tasks", "length", "--lengths", "64", "--tracking-uri", uri)
    assert code == 0, err
    assert f"into MLflow run {trained}" in out and any(k.startswith("length_loss/") for k in cl.get_run(trained).data.metrics)


# ---- 3. a NaN model never reads as sink-free -----------------------------------------------------------
def test_probe_of_nan_weights_reports_nan_and_warns(tmp_path, capsys, module_uri):
    from mlflow.tracking import MlflowClient

    net = model(gate={"position": "G1"})
    with torch.no_grad():
        for p in net.parameters():
            p.fill_(float("nan"))
    trial = trial_dir(tmp_path / "t", net)
    code, out, err = run_cli(
        capsys,
        "probe",
        trial,
        "--data",
        "bigram-backcopy",
        "--sequences",
        2,
        "--seq-len",
        32,
        "--out",
        tmp_path / "p",
        "--log",
        "--tracking-uri",
        module_uri,
    )
    assert code == 0, err
    assert "sink ratio (Gu et al., eps 0.3, first 64 tokens) nan" in out and "below 1e-2 nan" in out
    assert "gatesweep: warning: the model's attention probabilities are not finite" in err
    cl = MlflowClient(module_uri)
    run = cl.search_runs(
        [cl.get_experiment_by_name("gatesweep-probes").experiment_id], f"tags.`gatesweep.probe_of` = '{trial / 'model.pt'}'"
    )[0]
    assert math.isnan(run.data.metrics["sink_ratio"]) and math.isnan(run.data.metrics["gate_frac_below_1e-2"])
    assert "not finite" in run.data.tags["gatesweep.probe_warnings"]
    assert json.loads((tmp_path / "p" / "probe.json").read_text())["warnings"]


# ---- 4. one file is one document ------------------------------------------------------------------
def test_a_file_reachable_twice_is_one_document(tmp_path):
    from orchestrator.data.documents import local_files, split_pieces

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("the held-out text. " * 50)
    (corpus / "b.txt").symlink_to(corpus / "a.txt")
    os.link(corpus / "a.txt", corpus / "c.txt")
    (corpus / "d.txt").write_text("the held-out text. " * 50)  # a copy: the same bytes
    (corpus / "e.txt").write_text("other text, same size" + " " * (950 - 21))  # same size as a.txt, other bytes
    assert (corpus / "e.txt").stat().st_size == (corpus / "a.txt").stat().st_size
    assert [p.name for p in local_files(corpus)] == ["a.txt", "e.txt"]
    pieces = list(split_pieces(str(corpus), val_fraction=0.5))
    held = {p.text for p in pieces if p.held_out}
    assert not held & {p.text for p in pieces if not p.held_out}, "held-out text is also in the training stream"


# ---- 5. memory is estimated before allocation ----------------------------------------------------------
def test_probe_refuses_a_pass_the_machine_cannot_hold_with_the_figure(tmp_path, capsys):
    trial = trial_dir(tmp_path / "t", model(max_seq_len=65536))
    t0, before = time.perf_counter(), rss_mb()
    line = one_line(run_cli(capsys, "probe", trial, "--data", "bigram-backcopy", "--seq-len", 65536, "--out", tmp_path / "p"))
    assert "one probe pass holds about" in line and "GiB" in line and "lower --sequences or --seq-len" in line
    assert time.perf_counter() - t0 < 10 and rss_mb() - before < 500, "refused before anything was allocated"


def test_import_refuses_an_unused_12_gib_tensor_from_its_header(tmp_path, capsys):
    hf = hf_dir(tmp_path / "hf", tmp_path)
    rewrite_safetensors(hf / "model.safetensors", extra={"unused.weight": ("F32", [3 * 2**30])})
    t0, before = time.perf_counter(), rss_mb()
    line = one_line(run_cli(capsys, "import", hf, "--out", tmp_path / "o"))
    assert "tensor unused.weight declares shape [3221225472] (12.00 GiB)" in line and "nothing was read" in line
    assert time.perf_counter() - t0 < 20 and rss_mb() - before < 500, "the 12 GiB were never read"
    assert not (tmp_path / "o").exists()


def test_import_refuses_an_unknown_tensor_by_name_before_reading_any(tmp_path, capsys):
    hf = hf_dir(tmp_path / "hf", tmp_path)
    rewrite_safetensors(hf / "model.safetensors", extra={"model.layers.0.mlp.bias": ("F32", [48])})
    one_line(run_cli(capsys, "import", hf, "--out", tmp_path / "o"), "tensors this config does not use: model.layers.0.mlp.bias")


@pytest.mark.parametrize("dtype", [torch.int32, torch.bool])
def test_integer_and_boolean_weights_are_refused(tmp_path, capsys, dtype):
    hf = hf_dir(tmp_path / "hf", tmp_path)
    rewrite_safetensors(hf / "model.safetensors", change=lambda k, v: v.to(dtype) if k == "model.norm.weight" else v)
    code = "I32" if dtype == torch.int32 else "BOOL"
    one_line(
        run_cli(capsys, "import", hf, "--out", tmp_path / "o"), f"tensor model.norm.weight has dtype {code}; weights must be floating point"
    )
    net = model()
    state = {k: v.to(dtype) if k == "norm.weight" else v for k, v in net.state_dict().items()}
    trial = trial_dir(tmp_path / "t", net, state=state)
    one_line(run_cli(capsys, "export", trial, "--out", tmp_path / "o"), "tensor norm.weight has dtype", "weights must be floating point")


# ---- 6. signals and a full disk at the end of a sweep -----------------------------------------------
def test_a_second_and_third_signal_are_noted_not_acted_on():
    from orchestrator.runtime import signals

    caught = 0
    with signals.as_interrupt():
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)
        except KeyboardInterrupt:
            caught += 1
        for sig in (signal.SIGINT, signal.SIGTERM):  # during the teardown: noted only
            try:
                os.kill(os.getpid(), sig)
                time.sleep(0.2)
            except KeyboardInterrupt:
                caught += 1
    assert caught == 1
    with signals.as_interrupt(), pytest.raises(KeyboardInterrupt):  # the next launch stops on the first signal again
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.5)


def test_a_signal_during_a_ray_start_is_held_until_it_is_up():
    from orchestrator.runtime import signals

    done = []
    with signals.as_interrupt(), pytest.raises(KeyboardInterrupt):
        with signals.deferred():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.3)
            done.append("recorded")  # what a cut-short start would skip: recording Ray's processes
        time.sleep(0.5)
    assert done == ["recorded"]


def test_a_sigint_ignored_on_entry_stays_ignored_and_sigterm_still_stops():
    """A shell's background job (`gatesweep run ... &` in a script, nohup) inherits SIGINT
    ignored: the terminal's Ctrl-C is not for it. The sweep keeps it so and still stops on SIGTERM."""
    from orchestrator.runtime import signals

    terminal = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a background job starts
    try:
        with signals.as_interrupt():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.3)  # not acted on: nothing raised
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.5)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, terminal)


@pytest.mark.slow
def test_a_full_disk_while_state_json_is_saved_closes_the_parent_and_says_how_to_resume(tmp_path, capsys, monkeypatch, module_uri):
    from mlflow.tracking import MlflowClient

    sweep = tmp_path / "s.yaml"
    base = {"model": {"size": "tiny"}, "data": {"source": "bigram-backcopy"}, "train": {"steps": 20, "eval_every": 0}}
    sweep.write_text(yaml.safe_dump({"name": "full", "base": base}))
    from orchestrator import storage

    write_json = storage.write_json

    def disk_full_for_state(path, obj, **dumps):  # what the atomic writer raises when the disk is full
        if Path(path).name == "state.json":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return write_json(path, obj, **dumps)

    monkeypatch.setattr(storage, "write_json", disk_full_for_state)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, "run", sweep, "--tracking-uri", module_uri)
    assert code == 1, out + err
    assert "Traceback" not in err and "the sweep's state could not be written" in err and "`gatesweep resume full` continues it" in err
    cl = MlflowClient(module_uri)
    parent = cl.search_runs(
        [cl.get_experiment_by_name("gatesweep").experiment_id], "tags.`gatesweep.sweep` = 'full' and tags.`gatesweep.kind` = 'sweep'"
    )[0]
    assert parent.info.status == "FAILED" and "could not be written" in parent.data.tags["gatesweep.failure_reason"]


# ---- 7. the UI's listeners cannot be widened from the environment ---------------------------------------
def test_the_ui_server_does_not_inherit_its_options_from_the_environment():
    from orchestrator.tracking.ui_server import server_env

    env, dropped = server_env(
        {
            "PATH": "/bin",
            "MLFLOW_GUNICORN_OPTS": "--bind 0.0.0.0:80",
            "UVICORN_UDS": "/tmp/s",
            "GUNICORN_CMD_ARGS": "-b 0.0.0.0",
            "MLFLOW_HOST": "0.0.0.0",
        }
    )
    assert dropped == ["GUNICORN_CMD_ARGS", "MLFLOW_GUNICORN_OPTS", "MLFLOW_HOST", "UVICORN_UDS"]
    assert env == {"PATH": "/bin", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


@pytest.mark.slow
def test_every_option_variable_of_mlflow_server_is_dropped():
    from mlflow.cli import server

    from orchestrator.tracking.ui_server import SERVER_OPTION_ENV

    read = {p.envvar for p in server.params if isinstance(p.envvar, str)}
    assert read <= set(SERVER_OPTION_ENV), sorted(read - set(SERVER_OPTION_ENV))


@pytest.mark.slow
def test_gatesweep_ui_with_a_bind_option_inherited_listens_on_loopback_only(tmp_path):
    import psutil
    from mlflow.tracking import MlflowClient

    MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").search_experiments()  # a store to open
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with socket.socket() as s:
        s.bind(("127.0.0.2", 0))
        widened = s.getsockname()[1]
    env = {**os.environ, "MLFLOW_GUNICORN_OPTS": f"--bind 127.0.0.2:{widened}", "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "ui", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 180
        up = False
        while time.time() < deadline and proc.poll() is None and not up:
            with socket.socket() as s:
                up = s.connect_ex(("127.0.0.1", port)) == 0
            time.sleep(0.5)
        assert up, "the UI did not come up"
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        listening = {c.laddr for p in tree for c in p.net_connections("inet") if c.status == psutil.CONN_LISTEN}
        assert listening and all(a.ip == "127.0.0.1" for a in listening), listening
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.2", widened)) != 0
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert "ignoring MLFLOW_GUNICORN_OPTS from the environment" in err


# ---- 8. tracebacks and wrong reasons ------------------------------------------------------------
def truncated(folder: Path) -> None:
    raw = (folder / "model.pt").read_bytes()
    (folder / "model.pt").write_bytes(raw[: len(raw) // 2])


def wrong_shape(folder: Path) -> None:
    blob = torch.load(folder / "model.pt", weights_only=True)
    blob["model"]["norm.weight"] = torch.ones(7)
    torch.save(blob, folder / "model.pt")


EVAL_DAMAGE = {
    "wrong_shaped_tensor": (wrong_shape, "norm.weight has shape [7], the config needs [32]"),
    "truncated_model_pt": (truncated, "cannot be loaded as weights"),
    "run_json_not_json": (lambda f: (f / "run.json").write_text("{not json"), "run.json: not a trial's run record"),
    "run_json_a_list": (lambda f: (f / "run.json").write_text("[1, 2]"), "run.json: not a trial's run record"),
    "run_json_a_device": (lambda f: ((f / "run.json").unlink(), (f / "run.json").symlink_to("/dev/zero")), "is not a regular file"),
    "config_a_list": (lambda f: torch.save({"model": {}, "config": [1]}, f / "model.pt"), "its config is not a mapping"),
}


@pytest.mark.parametrize("case", sorted(EVAL_DAMAGE))
def test_eval_refuses_damaged_trials_in_one_line(tmp_path, capsys, case):
    damage, needle = EVAL_DAMAGE[case]
    folder = trial_dir(tmp_path / "t", run_json={"run_id": RUN_A})
    damage(folder)
    with within(30):
        one_line(run_cli(capsys, "eval", folder, "--tasks", "length", "--no-log"), needle)


def test_eval_limit_names_what_it_limits(tmp_path, capsys):
    folder = trial_dir(tmp_path / "t")
    one_line(run_cli(capsys, "eval", folder, "--tasks", "ruler", "--limit", 200000), "--limit: got 200000; allowed: 1..100,000 with ruler")
    code, _, err = run_cli(capsys, "eval", folder, "--tasks", "length", "--limit", 200000, "--lengths", "64", "--no-log")
    assert code == 0, err  # --limit does not concern the length task: no message about samples


@pytest.mark.parametrize("device", ["fifo", "/dev/zero", "/dev/urandom"])
def test_data_prepare_of_a_fifo_or_a_device_is_refused_at_once(tmp_path, capsys, device):
    if device == "fifo":
        device = str(tmp_path / "corpus.txt")
        os.mkfifo(device)
    with within(30):
        one_line(run_cli(capsys, "data", "prepare", device), "not a regular file or folder")


# ---- 9. terminal and markdown injection ----------------------------------------------------------------
HOSTILE = ["\x1b[2J\x1b[Hall trials finished\n", "ab\u202edc", "\n\n| injected | row |"]


def test_hostile_values_reach_the_terminal_and_markdown_as_escapes(tmp_path, capsys, monkeypatch):
    from orchestrator.launch.summary import summary_markdown

    sweep = tmp_path / "inj.yaml"
    sweep.write_text(
        yaml.safe_dump(
            {"name": "inj", "base": {"model": {"size": "tiny"}, "data": {"source": "bigram-backcopy"}}, "grid": {"data.separator": HOSTILE}}
        )
    )
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, "validate", sweep)
    assert code == 0, err
    code, out, err = run_cli(capsys, "plan", sweep)
    assert code == 0, err
    assert "\x1b" not in out and "\u202e" not in out and "\n| injected" not in out
    assert "\\x1b[2J\\x1b[Hall trials finished\\n" in out and "ab\\u202edc" in out
    md = summary_markdown("inj", [{"name": "separator=\\x0a", "status": "failed", "reason": "boom | x\nnext line"}])
    rows = [line for line in md.splitlines() if line.startswith("| ")]
    assert len(rows) == 2 and "boom \\| x\\nnext line" in md


def test_the_reports_tables_escape_what_the_store_holds():
    from dashboards.sections.writers import md_table, term_table

    md = md_table(["axis", "loss"], [[HOSTILE[0], "1.0"], [HOSTILE[2], "2.0"]], 1)
    assert len(md) == 4 and all(line.startswith("|") and "\x1b" not in line for line in md)
    term = term_table(["axis", "loss"], [[HOSTILE[1], "1.0"]], 1, 100)
    assert "\u202e" not in "\n".join(term) and "ab\\u202edc" in term[2]


# ---- 10. oversubscription ---------------------------------------------------------------------------
def test_oversubscription_is_said_by_plan(tmp_path, capsys):
    cores = len(os.sched_getaffinity(0))
    sweep = tmp_path / "wide.yaml"
    sweep.write_text(
        yaml.safe_dump(
            {
                "name": "wide",
                "base": {"model": {"size": "tiny"}, "data": {"source": "bigram-backcopy"}},
                "resources": {"workers_per_trial": cores + 2, "cpus_per_worker": 1},
            }
        )
    )
    code, out, err = run_cli(capsys, "plan", sweep, "--tracking-uri", f"sqlite:///{tmp_path / 'none.db'}")
    assert code == 0, err
    assert f"warning: resources: a trial takes workers_per_trial {cores + 2} x cpus_per_worker 1 CPUs, this machine has {cores}" in out
    from orchestrator.ray.cluster import oversubscription
    from orchestrator.spec.search import ResourcesConfig

    assert "the local Ray is told 5 CPUs" in oversubscription(ResourcesConfig(workers_per_trial=4, cpus_per_worker=1), cores=2)
    assert oversubscription(ResourcesConfig(workers_per_trial=1, cpus_per_worker=1), cores=2) is None


# ---- 11. the logger's retry is typed and bounded ----------------------------------------------------
def test_a_permanent_error_that_quotes_transient_words_is_raised_at_once(module_uri):
    from mlflow.exceptions import MlflowException

    from orchestrator.tracking import RunLogger

    logger = RunLogger.create(module_uri, "retry", run_name="r", quiet=True)
    logger.log_params({"note": "first"})
    t0 = time.perf_counter()
    with within(60), pytest.raises(MlflowException) as err:  # MLflow refuses to change a param: permanent, whatever the words
        logger.log_params({"note": "connection timeout 503 500 502 refused"})
    assert time.perf_counter() - t0 < 5 and "503" in str(err.value)


def test_transient_errors_are_known_by_type_and_code():
    import requests
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE

    from orchestrator.tracking.logger import transient

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    try:
        requests.get(f"http://127.0.0.1:{port}/", timeout=2)
    except requests.ConnectionError as err:
        refused = err
    assert transient(refused)
    wrapped = None
    try:
        try:
            raise refused
        except requests.ConnectionError:
            raise MlflowException(f"API request to http://127.0.0.1:{port} failed with exception {refused}") from None
    except MlflowException as err:
        wrapped = err
    assert transient(wrapped)  # MLflow's REST client wraps it, its context keeps it
    assert not transient(MlflowException("run 5003c0ffee: connection timeout", error_code=INVALID_PARAMETER_VALUE))
    db = Path(os.environ.get("TMPDIR", "/tmp")) / f"locked-{os.getpid()}.db"
    holder = sqlite3.connect(db, timeout=0)
    holder.execute("create table t (x)")
    holder.execute("begin exclusive")
    try:
        sqlite3.connect(db, timeout=0).execute("select * from t")
    except sqlite3.OperationalError as err:
        locked = err
    finally:
        holder.close()
        db.unlink()
    assert "locked" in str(locked) and transient(locked)


@pytest.mark.slow
def test_params_are_retried_in_a_bounded_loop_not_by_recursion(monkeypatch):
    from orchestrator.tracking import client
    from orchestrator.tracking.logger import StoreCalls

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cl = client(f"http://127.0.0.1:{port}")
    calls = StoreCalls(quiet=True, patience=2.0)
    attempts = []

    def send():
        attempts.append(time.perf_counter())
        cl.set_tag("0" * 32, "k", "v")

    t0 = time.perf_counter()
    with pytest.raises(Exception) as err:  # the store's own error, once the patience is spent
        calls._call(send)
    assert not isinstance(err.value, RecursionError) and time.perf_counter() - t0 < 20
    assert len(attempts) >= 2, "retried"
    assert calls.warnings and "unreachable" in calls.warnings[0]


# ---- 12. validate and plan agree on tracking.uri -------------------------------------------------------
@pytest.mark.parametrize("uri, needle", [("ftp://example.org/x", "allowed schemes"), ("sqlite:////no/such/folder/m.db", "does not exist")])
def test_validate_refuses_the_tracking_uri_plan_refuses(tmp_path, capsys, uri, needle):
    sweep = tmp_path / "u.yaml"
    sweep.write_text(
        yaml.safe_dump({"name": "u", "base": {"model": {"size": "tiny"}, "data": {"source": "bigram-backcopy"}}, "tracking": {"uri": uri}})
    )
    trial = tmp_path / "t.yaml"
    trial.write_text(yaml.safe_dump({"model": {"size": "tiny"}, "tracking": {"uri": uri}}))
    lines = [
        one_line(run_cli(capsys, cmd, f), "tracking.uri: got", needle)
        for cmd, f in (("validate", sweep), ("plan", sweep), ("validate", trial))
    ]
    assert lines[0] == lines[1], "validate and plan refuse the same file with the same line"


# ---- and 24 more, nobody had tried them -----------------------------------------------------------------
def test_resume_takes_sweep_names_not_paths(tmp_path, capsys):
    one_line(run_cli(capsys, "resume", "../../etc", "--runs-dir", tmp_path / "runs"), "not a sweep file nor a sweep name")


def test_resume_with_a_state_file_that_is_a_device_is_refused_unread(tmp_path, capsys):
    folder = tmp_path / "runs" / "sweeps" / "dev"
    folder.mkdir(parents=True)
    (folder / "state.json").symlink_to("/dev/zero")
    with within(30):
        one_line(run_cli(capsys, "resume", "dev", "--runs-dir", tmp_path / "runs"), "damaged sweep state (not a regular file)")


@pytest.mark.parametrize("name", ["config.json", "tokenizer.json"])
def test_import_of_a_folder_whose_json_is_a_device_is_refused_unread(tmp_path, capsys, name):
    hf = hf_dir(tmp_path / "hf", tmp_path)
    (hf / name).unlink()
    (hf / name).symlink_to("/dev/urandom")
    with within(30):
        one_line(run_cli(capsys, "import", hf, "--out", tmp_path / "o"), "is not a regular file")


def test_import_of_weights_that_are_a_fifo_is_refused_unread(tmp_path, capsys):
    hf = hf_dir(tmp_path / "hf", tmp_path)
    (hf / "model.safetensors").unlink()
    os.mkfifo(hf / "model.safetensors")
    with within(30):
        one_line(run_cli(capsys, "import", hf, "--out", tmp_path / "o"), "no model.safetensors or model.safetensors.index.json")


def test_import_of_an_index_naming_a_shard_outside_the_folder(tmp_path, capsys):
    hf = hf_dir(tmp_path / "hf", tmp_path)
    (hf / "model.safetensors").rename(tmp_path / "outside.safetensors")
    (hf / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"model.norm.weight": "../outside.safetensors"}}))
    one_line(run_cli(capsys, "import", hf, "--out", tmp_path / "o"), "names the shard '../outside.safetensors', which is not in")


def test_import_of_a_truncated_safetensors_file(tmp_path, capsys):
    hf = hf_dir(tmp_path / "hf", tmp_path)
    raw = (hf / "model.safetensors").read_bytes()
    (hf / "model.safetensors").write_bytes(raw[:-64])
    one_line(run_cli(capsys, "import", hf, "--out", tmp_path / "o"), "damaged safetensors file", "truncated")


def test_import_seq_len_below_two(tmp_path, capsys):
    one_line(run_cli(capsys, "import", tmp_path, "--seq-len", 1), "--seq-len: got 1; allowed: >= 2")


def test_probe_with_a_tokenizer_that_is_a_device(tmp_path, capsys):
    hf = hf_dir(tmp_path / "hf", tmp_path)
    (tmp_path / "corpus.txt").write_text("some text to probe with. " * 400)
    with within(30):
        one_line(
            run_cli(capsys, "probe", hf, "--data", tmp_path / "corpus.txt", "--tokenizer", "/dev/zero", "--out", tmp_path / "p"),
            "is not a regular file",
        )


def test_probe_with_data_that_is_a_device(tmp_path, capsys):
    trial = trial_dir(tmp_path / "t")
    with within(30):
        one_line(run_cli(capsys, "probe", trial, "--data", "/dev/zero", "--out", tmp_path / "p"), "not a regular file or folder")


def test_probe_with_a_nan_threshold(tmp_path, capsys):
    one_line(run_cli(capsys, "probe", tmp_path, "--data", "bigram-backcopy", "--sink-eps", "nan"), "--sink-eps: got nan")


def test_probe_out_that_is_a_file(tmp_path, capsys):
    trial = trial_dir(tmp_path / "t")
    (tmp_path / "f").write_text("x")
    one_line(
        run_cli(capsys, "probe", trial, "--data", "bigram-backcopy", "--sequences", 2, "--seq-len", 16, "--out", tmp_path / "f"),
        "cannot be written",
    )


def test_export_out_below_a_file(tmp_path, capsys):
    trial = trial_dir(tmp_path / "t")
    (tmp_path / "f").write_text("x")
    one_line(run_cli(capsys, "export", trial, "--out", tmp_path / "f" / "sub", "--no-tokenizer"), "cannot be created")
    one_line(run_cli(capsys, "export", trial, "--out", tmp_path / "f", "--no-tokenizer"), "is a file")


def test_export_with_an_integer_dtype(tmp_path, capsys):
    one_line(run_cli(capsys, "export", tmp_path, "--out", tmp_path / "o", "--dtype", "int8"), "--dtype: got 'int8'")


def test_export_with_a_run_record_that_names_no_run(tmp_path, capsys):
    trial = trial_dir(tmp_path / "t", run_json={"run_id": "../../etc/passwd"})
    one_line(run_cli(capsys, "export", trial, "--out", tmp_path / "o"), "run.json: not a trial's run record")


def test_eval_of_a_hugging_face_folder_says_to_import_it(tmp_path, capsys):
    hf = hf_dir(tmp_path / "hf", tmp_path)
    one_line(run_cli(capsys, "eval", hf, "--tasks", "ppl", "--no-log"), "`gatesweep import` it first")


def test_eval_with_lengths_that_are_not_lengths(tmp_path, capsys):
    trial = trial_dir(tmp_path / "t")
    one_line(run_cli(capsys, "eval", trial, "--tasks", "length", "--lengths", "0,-5", "--no-log"), "--lengths: got '0,-5'")


def test_data_prepare_of_a_folder_with_a_fifo_and_a_symlink_loop_reads_the_real_file(tmp_path, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "real.txt").write_text("to be or not to be, that is the question.\n" * 1000)
    os.mkfifo(corpus / "pipe.txt")
    (corpus / "loop").symlink_to(corpus)
    with within(120):
        code, out, err = run_cli(capsys, "data", "prepare", corpus)
    assert code == 0, err
    assert "done in" in out


def test_data_prepare_with_a_nan_held_out_share(tmp_path, capsys):
    (tmp_path / "c.txt").write_text("text " * 100)
    one_line(run_cli(capsys, "data", "prepare", tmp_path / "c.txt", "--val-fraction", "nan"), "--val-fraction: got nan")


def test_train_with_a_device_as_its_corpus(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    one_line(
        run_cli(capsys, "train", ROOT / "examples" / "bigram_g1.yaml", "--set", "data.source=/dev/zero"), "not a regular file or folder"
    )
    assert not (tmp_path / "mlflow.db").exists()


def test_train_with_a_fifo_as_its_config(tmp_path, capsys):
    os.mkfifo(tmp_path / "t.yaml")
    with within(30):
        one_line(run_cli(capsys, "train", tmp_path / "t.yaml"), "is not a regular file (a device, pipe or socket)")


def test_ui_with_a_port_out_of_range(capsys):
    one_line(run_cli(capsys, "ui", "--port", 0), "--port: got 0; allowed: 1..65535")


def test_validate_a_trial_whose_sqlite_store_folder_is_missing(tmp_path, capsys):
    trial = tmp_path / "t.yaml"
    trial.write_text("model: {size: tiny}\ntracking: {uri: 'sqlite:////nowhere/at/all/m.db'}\n")
    one_line(run_cli(capsys, "validate", trial), "tracking.uri: got", "does not exist")


def test_the_corpus_has_a_case_per_class_and_twenty_more():
    tests = [name for name in globals() if name.startswith("test_")]
    assert len(tests) >= 12 + 20, len(tests)
