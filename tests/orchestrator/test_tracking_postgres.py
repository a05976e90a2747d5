"""gatesweep against MLflow on PostgreSQL: an `mlflow server` on a real PostgreSQL with artifacts
proxied to a real S3 server (moto), with and without MLflow's basic-auth app, and a
`postgresql://` URI given to gatesweep directly. Every service on 127.0.0.1, stopped by pid."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from tests.services.postgres import PASSWORD as PG_PASSWORD
from tests.services.s3 import SECRET_KEY

pytestmark = pytest.mark.slow

BASE = {
    "model": {"size": "bigram-1l"},
    "data": {"seq_len": 32},
    "train": {"steps": 20, "batch_size": 8, "warmup_steps": 2, "eval_every": 10, "log_every": 5},
    "eval": {"batches": 1, "batch_size": 8, "probe_sequences": 4},
}
LOSS_STEPS = list(range(5, 21, 5))


def write_sweep(tmp_path: Path, name: str, **fields) -> Path:
    doc = {"name": name, "base": BASE, "tracking": {"experiment": name}, **fields}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def without_object_store_credentials(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The test's environment without any AWS_* variable: a client of a proxying server needs none."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return {**env, **(extra or {})}


def cli(*args, cwd: Path, env: dict[str, str], timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env
    )


def store_rows(t, sql: str) -> list:
    """Rows of the test's own PostgreSQL database (the server's backend store), read directly."""
    return t.postgres.sql(sql, t.database)


def test_a_sweep_report_ui_and_eval_on_mlflow_over_postgres_with_artifacts_in_s3(pg_tracking_server, tmp_path):
    """`run` (2 trials), `report`, `ui` and `eval` against `mlflow server` on PostgreSQL with
    `--artifacts-destination s3://...`; the driver and its trials have no AWS_* variable: every
    artifact (plots, weights, the report) goes through the server into the bucket."""
    t = pg_tracking_server
    env = without_object_store_credentials()
    f = write_sweep(tmp_path, "pgsweep", grid={"model.gate.position": ["none", "G1"]})
    out = cli("run", str(f), "--tracking-uri", t.uri, "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]

    runs = store_rows(t, "select run_uuid, experiment_id, status, artifact_uri from runs order by start_time")
    assert len(runs) == 3 and {r[2] for r in runs} == {"FINISHED"}, runs
    parent = [r for r in runs if r[0] not in {c[0] for c in store_rows(t, "select run_uuid from tags where key = 'mlflow.parentRunId'")}]
    assert len(parent) == 1
    children = [r for r in runs if r is not parent[0]]
    for run_id, *_ in children:
        steps = store_rows(t, f"select step from metrics where run_uuid = '{run_id}' and key = 'train/loss' order by step")
        assert [s for (s,) in steps] == LOSS_STEPS, "every train/loss point exactly once, in PostgreSQL"
    assert all(r[3].startswith("mlflow-artifacts:/") for r in runs), "artifacts are proxied by the server"

    keys = t.s3.object_keys("test-bucket", "mlflow/")
    for run_id, exp_id, *_ in children:
        mine = [k for k in keys if k.startswith(f"mlflow/{exp_id}/{run_id}/artifacts/")]
        assert f"mlflow/{exp_id}/{run_id}/artifacts/model/model.pt" in mine, mine
        assert any(k.endswith(".png") for k in mine), mine
    parent_keys = [k for k in keys if f"/{parent[0][0]}/artifacts/" in k]
    assert any(k.endswith("report/report.html") for k in parent_keys), parent_keys
    assert not (tmp_path / "mlartifacts").exists() and not (tmp_path / "mlruns").exists()

    # report: through MLflow's API (the SQLite reader is for sqlite:/// stores only)
    report = cli("report", "pgsweep", "--tracking-uri", t.uri, "--out", str(tmp_path / "report"), "--format", "json", cwd=tmp_path, env=env)
    assert report.returncode == 0, report.stderr[-3000:]
    data = json.loads((tmp_path / "report" / "report.json").read_text())
    assert len(data["rows"]) == 2 and (tmp_path / "report" / "loss_curves.png").stat().st_size > 0

    ui = cli("ui", "--tracking-uri", t.uri, "--sweep", "pgsweep", cwd=tmp_path, env=env, timeout=120)
    assert ui.returncode == 0, ui.stderr[-2000:]
    assert f"the store is already an MLflow server: open {t.uri}" in ui.stdout
    assert f"{t.uri}/#/experiments/{parent[0][1]}" in ui.stdout and parent[0][0] in ui.stdout

    child = children[0][0]
    ev = cli("eval", child, "--tasks", "length", "--tracking-uri", t.uri, cwd=tmp_path, env=env)
    assert ev.returncode == 0, ev.stderr[-3000:]
    logged = store_rows(t, f"select key from latest_metrics where run_uuid = '{child}' and key like 'length_%'")
    assert logged and f"into MLflow run {child}" in ev.stdout, ev.stdout[-2000:]

    for text in (out.stdout, out.stderr, report.stdout, report.stderr, ui.stdout, ev.stdout, ev.stderr):
        assert SECRET_KEY not in text and PG_PASSWORD not in text
    every_value = store_rows(t, "select value from params union all select value from tags")
    assert not [v for (v,) in every_value if SECRET_KEY in v or PG_PASSWORD in v]


def _every_object(s3) -> dict[str, bytes]:
    cl = s3.client()
    return {k: cl.get_object(Bucket="test-bucket", Key=k)["Body"].read() for k in s3.object_keys("test-bucket")}


def _every_file(folder: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in folder.rglob("*") if p.is_file() and not p.is_symlink()}


def test_a_sweep_with_basic_auth_logs_the_password_nowhere_and_a_wrong_one_is_refused(pg_auth_tracking_server, tmp_path):
    """MLflow's basic-auth app on PostgreSQL: the credentials come from MLFLOW_TRACKING_USERNAME /
    PASSWORD only; the password (and the S3 secret the server holds) is in no console line, param,
    tag, artifact or file under the runs folder (the end-of-sweep report is there). A wrong password: one line, exit 2,
    nothing written."""
    t = pg_auth_tracking_server
    f = write_sweep(tmp_path, "authsweep")
    wrong = without_object_store_credentials({**t.client_env(), "MLFLOW_TRACKING_PASSWORD": "wrong-Pw-Qz1"})
    refused = cli("run", str(f), "--tracking-uri", t.uri, "--runs-dir", str(tmp_path / "refused"), cwd=tmp_path, env=wrong)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    line = refused.stderr.strip()
    assert "\n" not in line and "refused the credentials (HTTP 401)" in line and t.uri in line, line
    assert "wrong-Pw-Qz1" not in refused.stdout + refused.stderr and "Traceback" not in line
    assert not (tmp_path / "refused").exists() and store_rows(t, "select count(*) from runs") == [(0,)]

    env = without_object_store_credentials(t.client_env())
    started = time.time()
    out = cli("run", str(f), "--tracking-uri", t.uri, "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert store_rows(t, "select status, count(*) from runs group by status") == [("FINISHED", 2)]
    print("measured:", [ln for ln in out.stdout.splitlines() if "finished in" in ln])
    assert (tmp_path / "runs" / "sweeps" / "authsweep" / "report" / "report.html").is_file()  # the end-of-sweep report

    objects = _every_object(t.s3)
    assert any(k.endswith("model/model.pt") for k in objects) and any(k.endswith("report/report.html") for k in objects)
    files = _every_file(tmp_path / "runs")
    assert files, "the runs folder and the report hold files"
    values = [v for (v,) in store_rows(t, "select value from params union all select value from tags")]
    for secret in (t.password, SECRET_KEY, PG_PASSWORD):
        assert secret and secret not in out.stdout + out.stderr
        assert not [v for v in values if secret in v]
        assert not [k for k, body in objects.items() if secret.encode() in body], "a secret in an artifact"
        assert not [p for p, body in files.items() if secret.encode() in body], (
            "a secret in a file of the runs folder (its report included)"
        )
    # Ray's own logs: its runtime_env_agent.log prints every runtime_env in clear; MLflow's
    # credentials and the tracking URI reach the trials through Ray's object store instead
    ray_root = Path(os.environ.get("RAY_TMPDIR", tempfile.gettempdir())) / "ray"
    logs = [p for d in ray_root.glob("session_2*") if d.stat().st_mtime >= started for p in d.rglob("*.log") if p.is_file()]
    assert any(p.name == "runtime_env_agent.log" for p in logs), "found the sweep's Ray session logs"
    leaked = [str(p) for p in logs if str(t.password).encode() in p.read_bytes()]
    assert not leaked, f"the MLflow password is in Ray's logs {leaked}"


BLOCK_DRIVERS = """\
import sys

class _NoDrivers:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("psycopg", "psycopg2", "psycopg_binary"):
            raise ImportError(f"No module named {name!r} (blocked by the test)")
        return None

sys.meta_path.insert(0, _NoDrivers())
"""


def test_a_postgresql_uri_given_to_gatesweep_directly(postgres, tmp_path):
    """`--tracking-uri postgresql://...` (no server): with psycopg (3) installed and psycopg2 not,
    the URI takes psycopg; the sweep and its report work. Without any driver (imports blocked by a
    sitecustomize), a wrong password or a missing database: one line, exit 2, nothing written."""
    from tests.services.postgres import DB_USER

    postgres.create_database("direct", template="mlflow_migrated")
    uri = postgres.uri("direct", driver="")  # postgresql://mlflow:...@127.0.0.1:PORT/direct
    f = write_sweep(tmp_path, "direct")
    env = without_object_store_credentials()

    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(BLOCK_DRIVERS)
    blocked = cli(
        "run", str(f), "--tracking-uri", uri, "--runs-dir", str(tmp_path / "r"), cwd=tmp_path, env={**env, "PYTHONPATH": str(blocker)}
    )
    assert blocked.returncode == 2, blocked.stdout + blocked.stderr
    line = blocked.stderr.strip()
    assert "\n" not in line and "no postgresql database driver is installed" in line, line
    assert "pip install 'psycopg[binary]'" in line and "psycopg2-binary" in line and PG_PASSWORD not in line
    named = cli("validate", str(f), cwd=tmp_path, env={**env, "PYTHONPATH": str(blocker)})
    assert named.returncode == 0  # validating a sweep file needs no store

    for bad, reason in (
        (postgres.uri("direct", driver="", password="wrong-Pw-Qz2"), f'password authentication failed for user "{DB_USER}"'),
        (postgres.uri("no_such_db", driver=""), 'database "no_such_db" does not exist'),
    ):
        out = cli("run", str(f), "--tracking-uri", bad, "--runs-dir", str(tmp_path / "r"), cwd=tmp_path, env=env)
        assert out.returncode == 2, out.stdout + out.stderr
        line = out.stderr.strip()
        assert "\n" not in line and reason in line and "refused the login" in line, line
        assert "wrong-Pw-Qz2" not in line and PG_PASSWORD not in line and "***@127.0.0.1" in line
    assert not (tmp_path / "r").exists() and postgres.sql("select count(*) from runs", "direct") == [(0,)]

    out = cli("run", str(f), "--tracking-uri", uri, "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert PG_PASSWORD not in out.stdout + out.stderr
    print("measured:", [ln for ln in out.stdout.splitlines() if "finished in" in ln])
    assert postgres.sql("select status, count(*) from runs group by status", "direct") == [("FINISHED", 2)]
    steps = postgres.sql("select step from metrics where key = 'train/loss' order by step", "direct")
    assert [s for (s,) in steps] == LOSS_STEPS
    report = cli(
        "report", "direct", "--tracking-uri", uri, "--no-plots", "--format", "json", "--out", str(tmp_path / "rep"), cwd=tmp_path, env=env
    )
    assert report.returncode == 0, report.stderr[-3000:]
    assert len(json.loads((tmp_path / "rep" / "report.json").read_text())["rows"]) == 1
    assert PG_PASSWORD not in report.stdout + report.stderr
    values = [v for (v,) in postgres.sql("select value from params union all select value from tags", "direct")]
    assert not [v for v in values if PG_PASSWORD in v]

    # `gatesweep ui` over the database: its own mlflow server, the URI (password) in its
    # environment, not on a command line anyone can read with ps
    shown, cmdlines = _ui_over(uri, "direct", tmp_path, env)
    assert "over postgresql+psycopg://***@127.0.0.1" in shown and "runs table:" in shown, shown
    assert PG_PASSWORD not in shown and not [c for c in cmdlines if PG_PASSWORD in c], cmdlines


def _ui_over(uri: str, sweep: str, tmp_path: Path, env: dict[str, str]) -> tuple[str, list[str]]:
    """Start `gatesweep ui` over `uri` (given in MLFLOW_TRACKING_URI), wait for its URLs, read the runs of the sweep through the
    UI's server, then Ctrl-C it. (its output, every command line of its process tree)"""
    import signal
    import urllib.request

    import psutil

    from tests.services.ports import free_port

    port = free_port()
    out_path = tmp_path / "ui.out"
    with open(out_path, "w") as fh:
        ui = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli", "ui", "--port", str(port), "--sweep", sweep],
            cwd=tmp_path,
            stdout=fh,
            stderr=subprocess.STDOUT,
            env={**env, "MLFLOW_TRACKING_URI": uri},  # a URI holding a password: kept off every command line
            start_new_session=True,
        )
    try:
        deadline = time.time() + 180
        while time.time() < deadline and "Ctrl-C stops the server" not in out_path.read_text() and ui.poll() is None:
            time.sleep(0.3)
        assert "Ctrl-C stops the server" in out_path.read_text(), out_path.read_text()[-3000:]
        cmdlines = [" ".join(p.cmdline()) for p in [psutil.Process(ui.pid), *psutil.Process(ui.pid).children(recursive=True)]]
        body = json.dumps({"experiment_ids": ["1"], "max_results": 10}).encode()
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/2.0/mlflow/runs/search", data=body, headers={"Content-Type": "application/json"}
        )
        runs = json.loads(urllib.request.urlopen(req, timeout=30).read())["runs"]
        assert len(runs) == 2, runs
        ui.send_signal(signal.SIGINT)
        assert ui.wait(timeout=60) == 0
    finally:
        if ui.poll() is None:
            os.killpg(ui.pid, signal.SIGKILL)
            ui.wait()
    return out_path.read_text(), cmdlines


def test_a_server_whose_artifact_bucket_is_missing_is_refused_before_anything_is_written(s3, tmp_path):
    """`--artifacts-destination s3://no-such-bucket/...`: the server answers an upload with HTTP
    500, which a trial would retry for minutes; the launch's preflight lists the destination
    (a read) and refuses in one line, exit 2, nothing written. The right bucket passes."""
    from tests.services.mlflow_server import MlflowServer

    server = MlflowServer(tmp_path / "server", artifacts_destination="s3://no-such-bucket/mlflow", env=s3.env()).start()
    try:
        f = write_sweep(tmp_path, "nobucket")
        env = without_object_store_credentials()
        out = cli("run", str(f), "--tracking-uri", server.uri, "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path, env=env)
        assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
        line = out.stderr.strip()
        assert "\n" not in line and "cannot use its artifact store" in line and "s3://no-such-bucket/mlflow" in line, line
        assert "The specified bucket does not exist" in line and SECRET_KEY not in line
        assert not (tmp_path / "runs").exists()
        from mlflow import MlflowClient

        assert [e.name for e in MlflowClient(server.uri).search_experiments()] == ["Default"]
    finally:
        server.stop()
    from orchestrator.launch.preflight import check_tracking_uri

    good = MlflowServer(tmp_path / "good", artifacts_destination="s3://test-bucket/mlflow", env=s3.env()).start()
    try:
        check_tracking_uri(good.uri)
    finally:
        good.stop()
