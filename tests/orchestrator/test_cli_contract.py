"""The CLI's error contract, for every command of the command table: a dead or refusing tracking
URI, a missing run, a closed stdout (`| head -1`) and Ctrl-C end in one line on stderr and a
non-zero exit, never a traceback (`orchestrator.cli.main`)."""

from __future__ import annotations

import http.server
import json
import os
import socket
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from orchestrator.cli.main import COMMANDS, main

from ..sweepstore import Trial, fill

ROOT = Path(__file__).resolve().parents[2]
QUICK = str(ROOT / "sweeps" / "quickstart.yaml")
TRIAL = str(ROOT / "examples" / "bigram_g1.yaml")
RUN_ID = "0123456789abcdef0123456789abcdef"
EXIT_CLOSED_OUTPUT = 141
"""128 + SIGPIPE, as a shell reports a program a closed pipe stopped (docs/cli.md)."""

#: command -> (arguments, the exit status against a dead store, text its one line must have);
#: the store is passed with --tracking-uri where the command takes one, and MLFLOW_TRACKING_URI
#: is the dead store for every command (those that use no store must not mind)
CASES = {
    "validate": ([QUICK], 0, ""),
    "plan": ([QUICK, "--tracking-uri", "DEAD"], 2, "cannot reach the MLflow tracking server"),
    "run": ([QUICK, "--tracking-uri", "DEAD"], 2, "cannot reach the MLflow tracking server"),
    "resume": (["quickstart", "--tracking-uri", "DEAD"], 2, "cannot reach the MLflow tracking server"),
    "train": ([TRIAL, "--tracking-uri", "DEAD"], 2, "cannot reach the MLflow tracking server"),
    "eval": ([RUN_ID, "--tracking-uri", "DEAD"], 2, "cannot reach the MLflow tracking server"),
    "report": (["quickstart", "--tracking-uri", "DEAD"], 2, "cannot reach the MLflow tracking server"),
    "ui": (["--tracking-uri", "DEAD"], 2, "cannot reach the MLflow tracking server"),
    "schema": ([], 0, ""),
    "data": ([], 0, ""),
    "export": ([RUN_ID, "--out", "exported", "--tracking-uri", "DEAD"], 2, "cannot reach the MLflow tracking server"),
    "import": (["no-such-folder"], 2, "no-such-folder"),  # reads no store: its own one-line error
    "probe": ([RUN_ID, "--data", "bigram-backcopy", "--tracking-uri", "DEAD"], 2, "cannot reach the MLflow tracking server"),
}


def test_every_command_of_the_table_has_a_case():
    assert set(CASES) == set(COMMANDS)


def dead_uri() -> str:
    """An http URI on a loopback port nobody listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def gatesweep(args: list[str], cwd: Path, env: dict[str, str], *, closed_stdout: bool = True, timeout: int = 240):
    """Run the CLI with stdout a pipe whose reader is already gone (what `| head -1` becomes
    once head has its line) unless `closed_stdout` is False; returns (exit status, stdout, stderr)."""
    cmd = [sys.executable, "-m", "orchestrator.cli", *args]
    if not closed_stdout:
        out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        return out.returncode, out.stdout, out.stderr
    r, w = os.pipe()
    os.close(r)
    try:
        out = subprocess.run(cmd, cwd=cwd, env=env, stdout=w, stderr=subprocess.PIPE, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    finally:
        os.close(w)
    return out.returncode, "", out.stderr


def lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


def base_env(tmp_path: Path, uri: str) -> dict[str, str]:
    return {**os.environ, "MLFLOW_TRACKING_URI": uri, "GATESWEEP_CACHE": str(tmp_path / "cache")}


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(CASES))
def test_every_command_against_a_dead_store_and_a_closed_stdout(tmp_path, command):
    """Against a dead store, with stdout closed as `| head -1` closes it: one line and the exit
    status of the case (a command that prints and needs no store stops quietly with 141), in
    seconds (not after MLflow's half minute of retries)."""
    import time

    uri = dead_uri()
    args, code, says = CASES[command]
    args = [uri if a == "DEAD" else a for a in args]
    if command == "resume":  # a launched sweep's state, so that resume gets as far as its store
        state = tmp_path / "runs" / "sweeps" / "quickstart"
        state.mkdir(parents=True)
        (state / "state.json").write_text(json.dumps({"name": "quickstart", "parent_run_id": RUN_ID, "sweep_file": QUICK, "trials": {}}))
        (state / "sweep.yaml").write_bytes(Path(QUICK).read_bytes())  # the stored copy: resume reads only this one
    t0 = time.monotonic()
    rc, _, err = gatesweep([command, *args], tmp_path, base_env(tmp_path, uri))
    took = time.monotonic() - t0
    assert "Traceback" not in err and "Exception ignored" not in err, err
    if code == 0:  # it printed into the closed pipe: it stops quietly
        assert rc == EXIT_CLOSED_OUTPUT and not lines(err), (rc, err)
    else:
        assert rc == code and len(lines(err)) == 1 and says in err, (rc, err)
        assert err.startswith("gatesweep: error: ")
    assert took < 60, f"{command} took {took:.0f} s"
    assert not (tmp_path / "exported").exists() and not (tmp_path / "mlflow.db").exists()


@pytest.mark.slow
def test_a_refusing_store_and_a_missing_run(tmp_path):
    """A server that refuses the credentials (HTTP 403); runs and sweeps that are not in a live store."""

    class Refuse(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(403)
            self.end_headers()

        do_POST = do_GET  # MLflow's client searches experiments with POST

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        refusing = f"http://127.0.0.1:{server.server_address[1]}"
        env = base_env(tmp_path, refusing)
        for args in (["report", "x", "--tracking-uri", refusing], ["ui", "--tracking-uri", refusing]):
            rc, _, err = gatesweep(args, tmp_path, env)
            assert rc == 2 and len(lines(err)) == 1 and "refused the credentials (HTTP 403)" in err, err
    finally:
        server.shutdown()
        server.server_close()

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    fill(uri, "s", [Trial({"model.gate": g, "train.seed": s}, {"val_ppl": 5.0 + s}) for g in ("none", "G1-elementwise") for s in (0, 1)])
    env = base_env(tmp_path, uri)
    for args, says in (
        (["eval", RUN_ID], f"run {RUN_ID}: not found"),
        (["export", RUN_ID, "--out", "x"], f"run {RUN_ID}: not found"),
        (["probe", RUN_ID, "--data", "bigram-backcopy"], f"run {RUN_ID}: not found"),
        (["report", "--parent", RUN_ID, "--no-log"], f"no run {RUN_ID!r}"),
        (["report", "t", "--no-log"], "no sweep named 't'"),
    ):
        rc, _, err = gatesweep(args, tmp_path, env)
        assert rc == 2 and len(lines(err)) == 1 and says in err and "Traceback" not in err, (args, err)


@pytest.mark.slow
def test_output_through_head_stops_quietly(tmp_path):
    """Real pipelines into `head -1`, and a report into a closed pipe (its files are written)."""
    env = base_env(tmp_path, f"sqlite:///{tmp_path / 'mlflow.db'}")
    for args in (["schema"], ["plan", QUICK]):
        cmd = " ".join([sys.executable, "-m", "orchestrator.cli", *args])
        out = subprocess.run(["bash", "-o", "pipefail", "-c", f"{cmd} | head -1"], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert len(out.stdout.splitlines()) == 1 and "Traceback" not in out.stderr and not lines(out.stderr), out.stderr
        assert out.returncode in (0, EXIT_CLOSED_OUTPUT)  # 0 when it finished before head closed the pipe
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    fill(
        uri,
        "s",
        [
            Trial({"model.gate": g, "train.seed": s}, {"val_ppl": 5.0 + s + (g == "none")})
            for g in ("none", "G1-elementwise")
            for s in (0, 1)
        ],
    )
    rc, _, err = gatesweep(["report", "s", "--format", "csv", "--no-plots", "--out", "rep"], tmp_path, env)
    assert rc == EXIT_CLOSED_OUTPUT and "Traceback" not in err, err
    assert (tmp_path / "rep" / "report.html").is_file()


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_main_turns_interrupts_and_store_errors_into_one_line(command, monkeypatch, capsys):
    """The one place: whatever a command raises, Ctrl-C is 130 and a store's error 2, each one
    line; any other exception is a bug and keeps its traceback."""
    args = {
        "validate": ["x.yaml"],
        "plan": ["x.yaml"],
        "run": ["x.yaml"],
        "resume": ["x"],
        "train": ["x.yaml"],
        "eval": ["x"],
        "report": ["x"],
        "ui": [],
        "schema": [],
        "data": [],
        "export": ["x", "--out", "y"],
        "import": ["x"],
        "probe": ["x", "--data", "y"],
    }[command]
    module = COMMANDS[command]
    for raised, code, says in (
        (KeyboardInterrupt(), 130, "gatesweep: interrupted"),
        (
            sqlite3.OperationalError("database is locked"),
            2,
            "gatesweep: error: the tracking store failed: OperationalError: database is locked",
        ),
    ):

        def boom(_args, raised=raised):
            raise raised

        monkeypatch.setattr(module, "run", boom)
        assert main([command, *args]) == code
        err = capsys.readouterr().err
        assert lines(err) == [says], err

    def wrapped(_args):  # a store's error under another: found through the chain
        raise RuntimeError("while reading the sweep") from sqlite3.DatabaseError("disk I/O error")

    monkeypatch.setattr(module, "run", wrapped)
    assert main([command, *args]) == 2 and "DatabaseError: disk I/O error" in capsys.readouterr().err

    def bug(_args):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(module, "run", bug)
    with pytest.raises(ZeroDivisionError):
        main([command, *args])
