"""Faults of the tracking store behind `mlflow server`: PostgreSQL restarted mid-sweep, then the
MLflow server itself restarted mid-sweep, in one sweep (real PostgreSQL, real `mlflow server`
with artifacts proxied to a real S3 server, real Ray and DeepSpeed). The sweep must end 0 with
every train/loss point exactly once in the store and its trial never retried. Also: the logger
itself across a PostgreSQL restart, and the S3 store behind the server frozen mid-trial."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow

STEPS, LOG_EVERY = 1200, 10
DOWN_S = 5.0


def _max_step(t, run_id: str) -> int | None:
    """The newest train/loss step in the server's PostgreSQL database (None while it is down)."""
    try:
        rows = t.postgres.sql(f"select max(step) from metrics where run_uuid = '{run_id}' and key = 'train/loss'", t.database)
    except Exception:  # PostgreSQL is down: no answer
        return None
    return rows[0][0]


def _wait_for_progress(t, run_id: str, above: int, timeout: float = 240.0) -> float:
    """Seconds until a train/loss step above `above` is in the store."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        step = _max_step(t, run_id)
        if step is not None and step > above:
            return time.monotonic() - t0
        time.sleep(0.2)
    raise AssertionError(f"no train/loss step above {above} within {timeout:.0f} s")


def test_postgres_and_then_the_mlflow_server_restarted_mid_sweep_lose_no_metric(pg_tracking_server, tmp_path):
    t = pg_tracking_server
    sweep = {
        "name": "pgfaults",
        "base": {
            "model": {"size": "bigram-1l"},
            "data": {"seq_len": 64},
            "train": {"steps": STEPS, "batch_size": 32, "eval_every": 500, "log_every": LOG_EVERY, "warmup_steps": 10},
            "eval": {"batches": 1, "batch_size": 8, "probe_sequences": 4},
        },
        "tracking": {"experiment": "pgfaults"},
    }
    f = tmp_path / "pgfaults.yaml"
    f.write_text(yaml.safe_dump(sweep))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}  # the server holds the S3 credentials
    log_path = tmp_path / "driver.log"
    with open(log_path, "w") as log:
        driver = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli", "run", str(f), "--tracking-uri", t.uri, "--runs-dir", str(tmp_path / "runs")],
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    measured: dict[str, float] = {}
    try:
        run_id = None
        deadline = time.monotonic() + 240
        while run_id is None and time.monotonic() < deadline and driver.poll() is None:
            rows = t.postgres.sql(
                "select m.run_uuid from metrics m where m.key = 'train/loss' limit 1",
                t.database,
            )
            run_id = rows[0][0] if rows else None
            time.sleep(0.3)
        assert run_id, log_path.read_text()[-3000:]

        for fault, service in (("postgres", t.postgres), ("mlflow_server", t.server)):
            before = _max_step(t, run_id) or 0
            assert before < STEPS - 300, f"the trial is nearly done before the {fault} fault; make it longer"
            t0 = time.monotonic()
            service.restart(down_s=DOWN_S)
            measured[f"{fault}_restart_s"] = time.monotonic() - t0
            measured[f"{fault}_store_stall_s"] = measured[f"{fault}_restart_s"] + _wait_for_progress(t, run_id, before)
        assert driver.wait(timeout=480) == 0, log_path.read_text()[-4000:]
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, 9)
            driver.wait()
    rows = t.postgres.sql(
        f"select step, timestamp from metrics where run_uuid = '{run_id}' and key = 'train/loss' order by step, timestamp", t.database
    )
    steps = [s for s, _ in rows]
    assert steps == list(range(LOG_EVERY, STEPS + 1, LOG_EVERY)), "every point arrived exactly once"
    status = t.postgres.sql("select status, count(*) from runs group by status", t.database)
    assert status == [("FINISHED", 2)], status  # the parent and its one trial, no retried trial's run
    stamps = [ts for _, ts in rows]
    gaps = [(b - a) / 1000 for a, b in zip(stamps, stamps[1:])]
    measured["train_step_gap_median_s"] = statistics.median(gaps)
    measured["train_step_gap_max_s"] = max(gaps)
    text = log_path.read_text()
    assert "unreachable" in text, text[-3000:]  # the trial said so on the driver's console
    print("measured:", {k: round(v, 2) for k, v in measured.items()})
    Path(os.environ.get("GATESWEEP_MEASURE_OUT", tmp_path / "measured.txt")).write_text(repr(measured))


def test_the_logger_rides_out_a_postgres_restart_behind_the_server(pg_tracking_server, monkeypatch):
    """In process, against the real server: with PostgreSQL down the server answers HTTP 503;
    opening a logger on a run waits for the database (a trial retried during the restart), a
    flush keeps its points, a tag waits; once PostgreSQL is back every point is there once."""
    import threading

    from mlflow.tracking import MlflowClient

    from orchestrator.tracking import RunLogger
    from orchestrator.tracking.logger import transient

    t = pg_tracking_server
    # MLflow's HTTP retries as a trial has them (orchestrator.tracking.store sets these defaults
    # at import; an earlier test's restored environment may have dropped them in this process):
    # with MLflow's own defaults one call waits out minutes of 503s inside the client
    for key, value in (
        ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2"),
        ("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1"),
        ("MLFLOW_HTTP_REQUEST_TIMEOUT", "20"),
    ):
        monkeypatch.setenv(key, value)
    cl = MlflowClient(t.uri)
    run_id = cl.create_run(cl.create_experiment("logger")).info.run_id
    cl.log_metric(run_id, "train/loss", 1.0, step=1)

    t.postgres.stop()
    with pytest.raises(Exception) as err:
        cl.get_run(run_id)
    assert transient(err.value), f"an answer of the server without its database is not transient: {err.value!r}"
    opened: list = []
    opener = threading.Thread(target=lambda: opened.append(RunLogger(t.uri, run_id, quiet=True)))
    opener.start()
    time.sleep(DOWN_S)
    assert not opened, "the logger opened a run while the database was down"
    t.postgres.start()
    opener.join(120)
    (logger,) = opened
    assert logger.logged_until == {"train/loss": 1}
    assert any("unreachable" in w for w in logger.warnings)

    t.postgres.stop()
    for step in range(2, 12):
        logger.log_metrics({"train/loss": 1.0 / step}, step=step)
    logger.log_metrics({"train/loss": 9.0}, step=1)  # already logged: dropped, never a duplicate
    assert not logger.flush(), "a flush with the database down reported success"
    tagged = threading.Thread(target=lambda: logger.set_tags({"k": "v"}))
    tagged.start()
    time.sleep(2)
    assert tagged.is_alive(), "a tag was given up while the database was down"
    t.postgres.start()
    tagged.join(120)
    assert logger.flush(wait=120)
    logger.finish()
    history = sorted((m.step, m.value) for m in cl.get_metric_history(run_id, "train/loss"))
    assert [s for s, _ in history] == list(range(1, 12)) and history[0][1] == 1.0
    run = cl.get_run(run_id)
    assert run.data.tags["k"] == "v" and run.info.status == "FINISHED"


def test_the_object_store_behind_the_server_frozen_while_a_trial_uploads(pg_tracking_server, tmp_path):
    """The S3 server behind `mlflow server` frozen (SIGSTOP: its connections hang) for 15 s from
    the trial's first logged point, three times the client's request timeout (5 s here, 20 s by
    default), while it trains, evaluates and uploads its plots and weights: the trial waits for
    the store, the sweep ends 0 and every object in the bucket is whole (the weights byte for
    byte the trial's model.pt), each uploaded once."""
    import hashlib

    t = pg_tracking_server
    sweep = {
        "name": "s3freeze",
        "base": {
            "model": {"size": "bigram-1l"},
            "data": {"seq_len": 32},
            "train": {"steps": 300, "batch_size": 8, "eval_every": 100, "log_every": 10, "warmup_steps": 2},
            "eval": {"batches": 1, "batch_size": 8, "probe_sequences": 4},
        },
        "tracking": {"experiment": "s3freeze"},
    }
    f = tmp_path / "s3freeze.yaml"
    f.write_text(yaml.safe_dump(sweep))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | {"MLFLOW_HTTP_REQUEST_TIMEOUT": "5"}
    log_path = tmp_path / "driver.log"
    with open(log_path, "w") as log:
        driver = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli", "run", str(f), "--tracking-uri", t.uri, "--runs-dir", str(tmp_path / "runs")],
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and driver.poll() is None:
            if t.postgres.sql("select 1 from metrics where key = 'train/loss' limit 1", t.database):
                break
            time.sleep(0.2)
        last = t.postgres.sql("select max(step) from metrics where key = 'train/loss'", t.database)[0][0]
        assert last is not None and last < 300, log_path.read_text()[-3000:]
        t.s3.pause()
        try:
            time.sleep(15)
            states = t.postgres.sql("select status from runs", t.database)
        finally:
            t.s3.resume()
        assert ("RUNNING",) in states, "the trial and its sweep were still uploading while the store was frozen"
        assert driver.wait(timeout=480) == 0, log_path.read_text()[-4000:]
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, 9)
            driver.wait()
    ((run_id, exp_id),) = t.postgres.sql(
        "select r.run_uuid, r.experiment_id from runs r join tags g on g.run_uuid = r.run_uuid and g.key = 'mlflow.parentRunId'",
        t.database,
    )
    key = f"mlflow/{exp_id}/{run_id}/artifacts/model/model.pt"
    keys = t.s3.object_keys("test-bucket", "mlflow/")
    assert key in keys, keys
    uploaded = t.s3.client().get_object(Bucket="test-bucket", Key=key)["Body"].read()
    (local,) = list((tmp_path / "runs").rglob("model.pt"))
    assert hashlib.sha256(uploaded).hexdigest() == hashlib.sha256(local.read_bytes()).hexdigest(), "a partial weights object"
    assert any(k.endswith("report/report.html") for k in keys)
    text = log_path.read_text()
    print("measured:", [ln[-200:] for ln in text.splitlines() if "finished in" in ln or "unreachable" in ln])
