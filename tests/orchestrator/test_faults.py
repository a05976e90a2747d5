"""Fault injection: a full disk (a file-size quota on a real process), a tampered checkpoint and
an unwritable runs folder (in-process), and a real `mlflow server` on 127.0.0.1 stopped for 10 s mid-sweep (longer than the
client's whole retry budget of about 3 s, so the trial buffers and says so)."""

from __future__ import annotations

import os
import pickle
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.services.mlflow_server import MlflowServer
from tests.support.cli import gatesweep, run_cli

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "bigram_g1.yaml"


@pytest.mark.slow
def test_full_disk_fails_clearly_and_leaves_no_checkpoint_that_looks_whole(tmp_path):
    limit = 12 * 2**20  # a file-size quota: MLflow's database fits, a `small` checkpoint (~64 MB) does not

    def quota():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    out = gatesweep(
        "train",
        str(EXAMPLE),
        "--set",
        "model.size=small",
        "--set",
        "data.seq_len=16",
        "--set",
        "train.steps=2",
        "--set",
        "train.batch_size=2",
        "--set",
        "eval.batches=1",
        "--set",
        "eval.batch_size=2",
        "--set",
        "eval.probe_sequences=2",
        "--quiet",
        cwd=tmp_path,
        preexec_fn=quota,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "checkpoint step2 could not be written" in out.stderr and "file-size limit 12 MiB" in out.stderr
    assert "Traceback" not in out.stderr
    ckpts = list((tmp_path / "runs").glob("train-*/checkpoints/step*"))
    assert all((c / "COMPLETE").exists() for c in ckpts), "a half-written checkpoint is left as if whole"
    assert not list((tmp_path / "runs").glob("train-*/model.pt"))


def test_unwritable_runs_dir_is_a_user_error(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # refused before anything is written: in-process
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    code, _, err = run_cli(capsys, "train", EXAMPLE, "--runs-dir", blocker / "runs")
    assert code == 2 and "--runs-dir" in err and "not a writable folder" in err
    assert not (tmp_path / "mlflow.db").exists()


class _Evil:
    def __reduce__(self):
        return (os.system, (f"touch {os.environ.get('EVIL_MARKER', '/tmp/gatesweep-evil')}",))


@pytest.mark.slow
def test_tampered_checkpoint_is_not_executed(tmp_path, monkeypatch, capsys):
    fast = [
        "--set",
        "train.steps=4",
        "--set",
        "train.checkpoint_every=2",
        "--set",
        "train.eval_every=0",
        "--set",
        "data.seq_len=16",
        "--set",
        "eval.batches=1",
        "--set",
        "eval.batch_size=4",
        "--set",
        "eval.probe_sequences=2",
    ]
    monkeypatch.chdir(tmp_path)  # in-process: what `train --resume` loads, not its process
    first = run_cli(capsys, "train", EXAMPLE, *fast, "--quiet")
    assert first.code == 0, first.err
    (ckpt,) = [p for p in (tmp_path / "runs").glob("train-*/checkpoints/step4")]
    marker = tmp_path / "pwned"
    with open(ckpt / "mp_rank_00_model_states.pt", "wb") as fh:
        pickle.dump({"module": _Evil()}, fh)
    monkeypatch.setenv("EVIL_MARKER", str(marker))
    again = run_cli(capsys, "train", EXAMPLE, *fast, "--resume", "--quiet")
    assert again.code == 1
    assert "Weights only load failed" in again.err or "weights_only" in again.err
    assert not marker.exists(), "the checkpoint ran code"


# ---- MLflow server outage ------------------------------------------------------------------
@pytest.mark.slow
def test_mlflow_server_down_for_10s_mid_sweep_loses_no_metric(tmp_path):
    server = MlflowServer(tmp_path)
    server.start()
    uri = f"http://127.0.0.1:{server.port}"
    sweep = {
        "name": "outage",
        "base": {
            "model": {"size": "bigram-1l"},
            "data": {"seq_len": 64},
            "train": {"steps": 1000, "batch_size": 32, "eval_every": 200, "log_every": 10, "warmup_steps": 10},
            "eval": {"batches": 1, "batch_size": 8, "probe_sequences": 4},
        },
        "tracking": {"experiment": "outage"},
    }
    f = tmp_path / "outage.yaml"
    f.write_text(yaml.safe_dump(sweep))
    log = open(tmp_path / "driver.log", "w")
    driver = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "run", str(f), "--tracking-uri", uri, "--runs-dir", str(tmp_path / "runs")],
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(uri)
        deadline = time.time() + 180
        run_id = None
        while time.time() < deadline and run_id is None:  # wait until the trial is logging
            exp = client.get_experiment_by_name("outage")
            if exp:
                runs = [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("gatesweep.kind") != "sweep"]
                if runs and client.get_metric_history(runs[0].info.run_id, "train/loss"):
                    run_id = runs[0].info.run_id
            time.sleep(0.5)
        assert run_id, (tmp_path / "driver.log").read_text()
        server.stop()
        time.sleep(10)
        server.start()
        assert driver.poll() is None, "the sweep ended during the outage: make its trial longer"
        assert driver.wait(timeout=400) == 0, (tmp_path / "driver.log").read_text()
    finally:
        if driver.poll() is None:
            driver.kill()
        history = None
        try:
            history = MlflowClient(uri).get_metric_history(run_id, "train/loss") if run_id else None
        finally:
            server.stop()
    steps = [m.step for m in history]
    assert sorted(steps) == list(range(10, 1001, 10)), "every point arrived exactly once"
    text = (tmp_path / "driver.log").read_text()
    assert "unreachable" in text, text[-3000:]
