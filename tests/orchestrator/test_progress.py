"""The sweep's live progress (orchestrator.ray.progress) without Ray: counts against the true
total that never lag an event, the ETA learned from finished trials (and before that from the
running trials' steps) laid out on the trial slots, retries, Optuna samples, the plain lines of
logs and CI (a status line every 30 s, not more), the terminal's bar; and Ray's and MLflow's own
log lines kept off the console (orchestrator.launch.logfile)."""

from __future__ import annotations

import io
import logging

import pytest

from orchestrator.ray.progress import BarDisplay, PlainDisplay, SweepProgress, Work, duration, eta_text, work_of


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def board(n: int = 12, *, concurrency: int = 2, steps: int = 1500, every_s: float = 30.0):
    clock, lines = Clock(), []
    plan = [Work(f"t{i}", steps, 2048, key=f"h{i}", arm=f"t{i}") for i in range(n)]
    b = SweepProgress(plan, concurrency=concurrency, display=PlainDisplay(lines.append, every_s=every_s), clock=clock)
    return b, clock, lines, plan


def test_counts_use_the_true_total_and_never_lag_an_event():
    b, clock, lines, plan = board()
    b.start("a", plan[0])
    b.start("b", plan[1])
    assert lines[-1].startswith("[0/12 done · 2 running · 0 failed · 0s · ETA ?] start   t1")
    clock.t += 65
    b.end("a", "done")
    assert lines[-1].startswith("[1/12 done · 1 running · 0 failed · 1m05s · ETA ~")  # this event counted, not the one before
    assert lines[-1].endswith("] done    t0")
    b.end("b", "failed", "diverged at step 7")
    assert lines[-1].startswith("[1/12 done · 0 running · 1 failed") and lines[-1].endswith("failed  t1: diverged at step 7")
    assert len(b.pending) == 10  # pending = the plan's trials not started, not the ones Tune created


def test_trials_a_ladder_does_not_promote_leave_the_total_and_the_eta():
    b, clock, _, plan = board(12, concurrency=2)
    b.start("a", plan[0])
    b.start("b", plan[1])
    clock.t += 100
    b.end("a", "done")
    b.end("b", "done")
    assert b.eta() == pytest.approx(500.0)  # 10 left on 2 slots
    b.skip({"h6", "h7", "h8", "h9", "h10", "h11"})  # an arm stopped: its upper rungs never run
    assert b.total == 6 and len(b.pending) == 4
    assert b.eta() == pytest.approx(200.0)
    assert b.status().startswith("[2/6 done")


def test_eta_learns_from_finished_trials_and_lays_the_rest_on_the_slots():
    b, clock, _, plan = board(12, concurrency=2)
    b.start("a", plan[0])
    b.start("b", plan[1])
    assert b.eta() is None  # nothing measured yet
    clock.t += 100
    b.end("a", "done")
    b.end("b", "done")
    # 100 s per trial, 10 left on 2 slots: 5 rounds
    assert b.eta() == pytest.approx(500.0)
    b.start("c", plan[2])
    clock.t += 40
    # c has 60 s left, the idle slot takes the first of the 9 pending: the last slot ends 500 s from now
    assert b.eta() == pytest.approx(500.0)
    assert "ETA ~8m" in b.status()


def test_eta_before_any_trial_finished_comes_from_the_reported_steps():
    b, clock, _, plan = board(4, concurrency=2, steps=1000)
    b.start("a", plan[0])
    b.start("b", plan[1])
    clock.t += 50
    b.report("a", 500, "val_loss 1.8")
    b.report("b", 250)
    # a: 500 steps in 50 s, b: 250 steps in 50 s -> 750 steps in 100 s: 0.133 s a step, 133 s a trial;
    # a's own pace says 100 s (50 left), b's 200 s (150 left); then two more trials of 133 s
    assert b.eta() == pytest.approx(150 + 133.33, rel=1e-3)
    assert b.steps_text() == "t0 500/1000, t1 250/1000"


def test_a_slow_trial_is_never_counted_as_nearly_done():
    b, clock, _, plan = board(3, concurrency=1, steps=100)
    b.start("a", plan[0])
    clock.t += 10
    b.end("a", "done")  # 10 s a trial
    b.start("b", plan[1])
    clock.t += 30
    b.report("b", 50)  # this one is slower: 30 s for half of it
    assert b.eta() == pytest.approx(30 + 10)  # its own pace (30 s left), then the last trial


def test_retry_and_optuna_samples_take_their_entries():
    clock, lines = Clock(), []
    plan = [Work("arm-a", 10, 1, arm="arm-a")] * 2 + [Work("arm-b", 10, 1, arm="arm-b")] * 2
    b = SweepProgress(plan, concurrency=2, display=PlainDisplay(lines.append), clock=clock)
    b.start("x", Work("arm-b-00001", 20, 1, arm="arm-b"))  # the sample's own steps (sampled) count
    assert [w.arm for w in b.pending] == ["arm-a", "arm-a", "arm-b"]
    b.retry("x", "worker died")
    assert lines[-1].endswith("retry   arm-b-00001: worker died") and len(b.pending) == 4 and not b.running
    b.start("x", Work("arm-b-00001", 20, 1, arm="arm-b"))
    b.end("x", "stopped")
    assert "1/4 done" in lines[-1] and "1 stopped early" in lines[-1]


def test_plain_status_line_every_30_s_with_each_running_trials_step():
    b, clock, lines, plan = board(3, every_s=30)
    b.start("a", plan[0])
    n = len(lines)
    for _ in range(29):
        clock.t += 1
        b.tick()
    assert len(lines) == n  # not before 30 s
    clock.t += 1
    b.report("a", 400)  # a result without metrics prints nothing
    assert len(lines) == n
    b.tick()
    # 400 steps in 30 s: 112.5 s a trial, 82.5 s left of this one, then two more on two slots
    assert lines[-1] == "[0/3 done · 1 running · 0 failed · 30s · ETA ~3m] running: t0 400/1500"
    clock.t += 29
    b.tick()
    assert len(lines) == n + 1
    clock.t += 1
    b.tick()
    assert lines[-1] == "[0/3 done · 1 running · 0 failed · 1m00s · ETA ~3m] running: t0 400/1500"
    b.close()
    assert lines[-1].startswith("[0/3 done")


def test_bar_on_a_terminal_with_event_lines_above_it():
    out = io.StringIO()
    clock = Clock()
    plan = [Work(f"t{i}", 100, 1, key=f"h{i}") for i in range(5)]
    b = SweepProgress(plan, concurrency=2, display=BarDisplay(out, refresh_s=1.0, columns=lambda: 100), clock=clock)
    b.start("a", plan[0])
    clock.t += 12
    b.report("a", 50)
    b.tick()
    b.end("a", "done")
    b.close()
    text = out.getvalue()
    assert "  start   t0\n" in text and "  done    t0\n" in text
    assert (
        "1/5 done |" in text and "| 0 running · 0 failed · 12s · ETA" in text and "1 running · 0 failed · 12s · ETA ~1m | t0 50/100" in text
    )


def test_work_of_a_payload_counts_tokens_with_samples_applied():
    from orchestrator.ray.payload import TrialPayload
    from orchestrator.storage import Location

    config = {"train": {"steps": 30, "batch_size": 8, "grad_accum": 2}, "data": {"seq_len": 32}}
    payload = TrialPayload(config=config, config_hash="abc", name="g", run_id=None, run_dir=Location.parse("/tmp/r"), tracking_uri="", experiment="e",
                           parent_run_id="p", sweep="s", workers=2)  # fmt: skip
    w = work_of(TrialPayload.from_dict(payload.to_dict()), {"train.steps": 60}, key="abc")
    assert (w.steps, w.tokens_per_step, w.key, w.arm, w.tokens) == (60, 8 * 2 * 2 * 32, "abc", "g", 60 * 1024)


def test_durations():
    assert [duration(s) for s in (0, 59.6, 252, 3600 + 180)] == ["0s", "1m00s", "4m12s", "1h03m"]
    assert [eta_text(s) for s in (None, 20, 130, 3600 * 2 + 300)] == ["?", "<1m", "~2m", "~2h05m"]


def test_library_log_lines_go_to_the_sweep_folder_not_the_console(tmp_path, capsys):
    import mlflow  # noqa: F401 (its import configures its logger)

    from orchestrator.launch.logfile import LOG_FILE, LibraryLog, attach

    console = io.StringIO()
    lib = logging.getLogger("mlflow")
    mine = logging.StreamHandler(console)
    lib.addHandler(mine)
    lib.setLevel(logging.INFO)
    try:
        with LibraryLog():
            logging.getLogger("mlflow.store.db.utils").info("Creating initial MLflow database tables...")
            logging.getLogger("ray.tune.utils.util").warning("The process_trial_result operation took 0.941 s")
            assert console.getvalue() == ""
            path = attach(tmp_path / "sweeps" / "s")
            logging.getLogger("mlflow").warning("after the folder")
        text = path.read_text()
        assert path.name == LOG_FILE and "Creating initial MLflow database tables" in text and "after the folder" in text
        assert "process_trial_result" in text
        assert mine in lib.handlers  # given back
        lib.info("back on the console")
        assert "back on the console" in console.getvalue()
        # a launch that stops before it has a folder: its warnings still reach stderr
        with LibraryLog():
            logging.getLogger("mlflow").info("quiet")
            logging.getLogger("mlflow").warning("store trouble")
        err = capsys.readouterr().err
        assert "store trouble" in err and "quiet" not in err
    finally:
        lib.removeHandler(mine)


def test_plan_measure_gives_its_parts_and_spread_and_says_when_the_machine_is_busy(tmp_path, monkeypatch, capsys):
    import os

    import yaml

    from orchestrator.cli import plan
    from orchestrator.cli.main import main

    doc = {
        "name": "m",
        "base": {"model": {"size": "bigram-1l"}, "data": {"seq_len": 32}, "train": {"steps": 300, "batch_size": 8, "eval_every": 100}},
        "grid": {"train.seed": [0, 1]},
        "tracking": {"experiment": "m"},
    }
    f = tmp_path / "m.yaml"
    f.write_text(yaml.safe_dump(doc))
    monkeypatch.setattr(os, "getloadavg", lambda: (9.0, 9.0, 9.0))
    from orchestrator.launch.plan_time import Measured

    real = plan.measure
    monkeypatch.setattr(plan, "measure", lambda configs, threads: Measured(4.0, real(configs, threads).steps))
    assert main(["plan", str(f), "--measure", "--tracking-uri", f"sqlite:///{tmp_path / 'none.db'}"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("estimated wall time: "))
    assert "10th to 90th percentile), the sum of:" in lines[head]
    parts = [ln.split()[0] for ln in lines[head + 1 : head + 7]]
    assert parts == ["start", "trial", "training", "evaluations", "waiting", "report"], lines[head : head + 8]
    assert "start-up probe P = 4.0 s" in out and ("2 trial(s) at once" in out or "1 trial(s) at once" in out)
    cpus = len(os.sched_getaffinity(0))
    assert f"note: the machine is busy (load average 9.0 on {cpus} cores)" in out
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert plan.load_note(cpus) == ""
    assert not (tmp_path / "none.db").exists()  # a dry run creates no store


@pytest.mark.parametrize("columns", [100, 72, 140])
def test_the_bar_fits_the_terminal_and_lists_running_trials_whole(columns):
    """Issue 35: on a 100-column terminal the bar cut the running trials mid-name."""
    out = io.StringIO()
    clock = Clock()
    names = ["G1-elementwise-lr=0.003-s0", "G2-elementwise-lr=0.003-s1", "none-lr=0.01-s2"]
    plan = [Work(n, 1500, 1, key=f"h{i}") for i, n in enumerate(names)] + [Work(f"p{i}", 1500, 1, key=f"p{i}") for i in range(20)]
    b = SweepProgress(plan, concurrency=3, display=BarDisplay(out, refresh_s=1.0, columns=lambda: columns), clock=clock)
    for i, w in enumerate(plan[:3]):
        b.start(f"t{i}", w)
    clock.t += 30
    for i in range(3):
        b.report(f"t{i}", 500)
    b.tick()
    b.close()
    frames = [f.strip("\n") for f in out.getvalue().replace("\r", "\n").split("\n") if "done |" in f]
    assert frames
    for frame in frames:
        assert len(frame.rstrip()) <= columns, (len(frame), frame)
        import re

        desc = re.match(r"^\d+/\d+ done \|.{10}(?:.{14})?\| (.*)$", frame.rstrip())
        listed = desc.group(1).split(" | ", 1)[1] if desc and " | " in desc.group(1) else ""
        for part in listed.split(", "):
            part = part.strip()
            if part and "running" not in part and "more" not in part:
                assert any(part == f"{n} 500/1500" or part == f"{n} 0/1500" for n in names), (part, frame)
    assert any("+" in f and ("more" in f or "running" in f) for f in frames) or columns >= 140
