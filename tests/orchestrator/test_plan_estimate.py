"""`gatesweep plan`: the time estimate as a sum of named parts (issue 35: a 2-trial file was
"6 s" and took 96 s: Ray's start, the trials' fixed costs and the report were not counted), an
Optuna search's samples in the trial count and the FLOPs, and one line when the sweep asks for
GPUs this machine lacks."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.cli import plan
from orchestrator.cli.main import main
from orchestrator.launch import plan_time
from orchestrator.launch.plan_time import Measured, TrialTime, contention, estimate, evaluations, makespan

ROOT = Path(__file__).resolve().parents[2]


def test_the_estimate_is_its_parts_and_counts_what_runs_besides_the_steps():
    trials = [TrialTime(fixed=2.0, train=30.0, train_low=25.0, train_high=40.0, evals=1.0) for _ in range(3)]
    measured = Measured(probe=4.0, steps={})
    est = estimate(trials, slots=2, measured=measured)
    names = [p.name for p in est.parts]
    assert names == ["start", "trial start-up", "training", "evaluations", "waiting", "report"]
    start, report = est.parts[0].seconds, est.parts[-1].seconds
    assert start == plan_time.START_S + plan_time.START_P * 4.0 and report == plan_time.REPORT_S + 3 * plan_time.REPORT_RUN_S
    # the trials' parts and the waiting add up to the schedule: 3 trials on 2 slots, each slot's first one starting a worker
    worker = plan_time.WORKER_S + plan_time.WORKER_P * 4.0
    span = makespan(trials, 2, worker)
    assert span == pytest.approx(2 * 33.0 + worker)
    assert est.seconds == pytest.approx(start + span + report)
    assert est.low < est.seconds < est.high
    # a step measured alone is slower when two trials share two cores with a busy machine's load
    assert contention(2, 0.0, 2) == 1.0 and contention(2, 6.0, 2) == pytest.approx((2 / 7) / (2 / 8))
    # a ladder's report fits laws: its part grows with the probe
    assert estimate(trials, slots=2, measured=measured, ladder=True).parts[-1].seconds == pytest.approx(
        report + plan_time.LADDER_REPORT_P * 4.0
    )


def test_evaluations_count_the_periodic_ones_and_the_last():
    from orchestrator.spec.trial import TrialConfig

    def cfg(steps, every):
        return TrialConfig.from_dict({"model": {"size": "bigram-1l"}, "train": {"steps": steps, "eval_every": every}})

    assert [evaluations(cfg(1500, 500)), evaluations(cfg(1000, 300)), evaluations(cfg(100, 0))] == [3, 4, 1]


def test_an_optuna_search_counts_its_samples_in_trials_and_flops(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path / 'none.db'}"
    assert main(["plan", str(ROOT / "sweeps" / "lr_sensitivity.yaml"), "--tracking-uri", uri]) == 0
    out = capsys.readouterr().out
    assert "3 arms x 6 samples each = 18 trials (0 already finished in the store, 18 to run)" in out
    rows = [ln.split() for ln in out.splitlines() if ln.startswith(("none ", "G1-"))]
    per_arm = [float(r[3]) for r in rows]
    total = float(out.split("training compute: ")[1].split()[0])
    assert len(rows) == 3 and total == pytest.approx(sum(per_arm), rel=1e-2) and all(r[4] == "(6" for r in rows)
    assert "(ASHA stops trials early" in out


def test_a_gpu_sweep_on_a_machine_without_them_says_so_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(plan, "local_gpus", lambda: 0)
    uri = f"sqlite:///{tmp_path / 'none.db'}"
    assert main(["plan", str(ROOT / "sweeps" / "paper_table2_dense.yaml"), "--measure", "--tracking-uri", uri]) == 0
    out = capsys.readouterr().out
    notes = [ln for ln in out.splitlines() if "GPU" in ln and ln.startswith("note:")]
    assert len(notes) == 1 and "this machine has 0 GPUs; the sweep asks for 32 per trial" in notes[0]
    assert "--measure times nothing on this machine" in notes[0]
    assert "estimated wall time" not in out and "warning: resources" not in out  # no CPU advice for a GPU sweep
    monkeypatch.setattr(plan, "local_gpus", lambda: 64)
    assert main(["plan", str(ROOT / "sweeps" / "paper_table2_dense.yaml"), "--tracking-uri", uri]) == 0
    assert "GPU" not in "".join(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("note:"))
