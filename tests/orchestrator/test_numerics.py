"""The numeric environment a trial records (`orchestrator.tracking.provenance`): what decides its
rounding besides config and seed, so that two runs can be checked for "same machine and
software" (docs/training.md, Repeatability), and a run resumed under another is marked mixed."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from mlflow.tracking import MlflowClient

from orchestrator.tracking import names, numerics, numerics_key, numerics_label, numerics_tags
from orchestrator.tracking.provenance import cpu_model
from orchestrator.trial.callbacks.mlflow_logging import MLflowLogging, run_tags

from .trial.fakes import config, fake_trainer


@pytest.fixture
def threads():
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9B45\nflags\t\t: fpu\n", "AMD EPYC 9B45"),
        ("processor\t: 0\nBogoMIPS\t: 48.00\nModel\t\t: Raspberry  Pi 5 Model B\n", "Raspberry Pi 5 Model B"),
        ("model name\t:\nHardware\t: BCM2835\n", "BCM2835"),  # an empty name is skipped
        ("model name\t: " + "x" * 500 + "\n", "x" * 200),
    ],
)
def test_the_processor_s_name_comes_from_cpuinfo(tmp_path, text, expected):
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    assert cpu_model(path) == expected


def test_an_unreadable_or_binary_cpuinfo_still_names_something(tmp_path):
    assert cpu_model(tmp_path / "missing")  # platform's name, or "unknown"
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"\xff\xfe\x00model name\x00\xc3(\n")
    assert isinstance(cpu_model(garbage), str) and cpu_model(garbage)


def test_numerics_records_the_threads_set_and_the_kernels_chosen(threads, monkeypatch):
    monkeypatch.delenv("MKL_CBWR", raising=False)
    threads(1)
    one = numerics()
    assert one["threads"] == 1 and one["cpu_isa"] == torch.backends.cpu.get_cpu_capability()
    assert one["torch"] == torch.__version__ and one["cpu"] and "env" not in one
    threads(2)
    two = numerics()
    assert two["threads"] == 2 and numerics_key(one) != numerics_key(two)
    monkeypatch.setenv("MKL_CBWR", "AVX2")
    pinned = numerics()
    assert pinned["env"] == {"MKL_CBWR": "AVX2"} and numerics_key(pinned) != numerics_key(two)
    assert numerics_key(two) == numerics_key(json.loads(json.dumps(two))), "the key survives the tag's JSON"
    assert "MKL_CBWR=AVX2" in numerics_label(json.dumps(pinned)) and "2 threads" in numerics_label(json.dumps(two))


def test_a_trial_run_is_tagged_with_its_environment_after_its_threads_are_set(threads, tmp_path):
    threads(1)
    tags = run_tags(config(), SimpleNamespace(run_dir=tmp_path, remote_dir=None, tags={}))
    recorded = json.loads(tags[names.NUMERICS_TAG])
    assert recorded["threads"] == 1 and tags[names.NUMERICS_KEY_TAG] == numerics_key(recorded)


def test_a_resumed_run_under_another_environment_is_mixed_and_a_restart_is_not():
    a, b = {"cpu": "A", "cpu_isa": "AVX512", "threads": 1, "torch": "2"}, {"cpu": "B", "cpu_isa": "AVX2", "threads": 1, "torch": "2"}
    first = numerics_tags(a)
    assert numerics_tags(a, first) == first, "the same environment again: unchanged"
    mixed = numerics_tags(b, first)
    assert mixed[names.NUMERICS_KEY_TAG] == f"{numerics_key(a)}+{numerics_key(b)}"
    assert json.loads(mixed[names.NUMERICS_TAG]) == {"mixed": [a, b]}
    assert numerics_label(mixed[names.NUMERICS_TAG]) == (
        "resumed under another environment: A, AVX512, 1 thread, torch 2; then B, AVX2, 1 thread, torch 2"
    )
    assert numerics_tags(b, mixed) == mixed, "resumed again where it last trained: still the same mix"
    again = numerics_tags(a, mixed)
    assert again[names.NUMERICS_KEY_TAG].count("+") == 2 and len(json.loads(again[names.NUMERICS_TAG])["mixed"]) == 3
    damaged = numerics_tags(b, {names.NUMERICS_KEY_TAG: "0123", names.NUMERICS_TAG: "{not json"})
    assert damaged[names.NUMERICS_KEY_TAG] == f"0123+{numerics_key(b)}"
    assert numerics_label(damaged[names.NUMERICS_TAG]).endswith("unreadable record; then B, AVX2, 1 thread, torch 2")
    assert numerics_tags(b, {}) == numerics_tags(b), "a run that recorded nothing before"


@pytest.mark.parametrize("tag", ["", "{not json", "[1, 2]", "null", json.dumps({"mixed": "no list"})])
def test_a_damaged_record_reads_as_unreadable_or_partial(tag):
    label = numerics_label(tag)
    assert label in ("unreadable record", "?processor, ?instruction set, ? threads, torch ?"), label


def test_a_gpu_record_leads_with_the_gpu():
    tag = json.dumps({"gpu": "NVIDIA H200", "cpu": "Intel Xeon", "cpu_isa": "AVX512", "threads": 8, "torch": "2.13.0"})
    assert numerics_label(tag) == "NVIDIA H200, Intel Xeon, AVX512, 8 threads, torch 2.13.0"


def test_mlflow_logging_marks_a_checkpoint_resumed_under_other_threads_as_mixed(threads, tmp_path, tracking_uri):
    ctx = SimpleNamespace(
        run_dir=tmp_path,
        remote_dir=None,
        tracking_uri=tracking_uri,
        experiment="num",
        run_id=None,
        run_name=None,
        parent_run_id=None,
        tags={},
        on_run=None,
    )
    cl = MlflowClient(tracking_uri)
    threads(1)
    log = MLflowLogging(config(), ctx)
    run_id = log.open()
    log.after_resume(fake_trainer(resumed_from=0))
    first = cl.get_run(run_id).data.tags[names.NUMERICS_KEY_TAG]
    assert "+" not in first

    def reopen(resumed_from: int) -> str:
        again = MLflowLogging(config(), SimpleNamespace(**{**vars(ctx), "run_id": run_id}))
        again.open()
        again.after_resume(fake_trainer(resumed_from=resumed_from))
        again.on_failure("crashed", "test")
        return cl.get_run(run_id).data.tags[names.NUMERICS_KEY_TAG]

    threads(2)
    restarted = reopen(0)  # a retry that found no checkpoint trains from scratch under 2 threads
    assert "+" not in restarted and restarted != first
    threads(1)
    mixed = reopen(10)  # a resume from step 10 made under 2 threads, continued under 1
    assert mixed == f"{restarted}+{first}"
    assert json.loads(cl.get_run(run_id).data.tags[names.NUMERICS_TAG])["mixed"][0]["threads"] == 2


@pytest.mark.parametrize(
    ("configured", "given", "omp", "expected"),
    [
        (3, 2, "5", 3),  # train.threads wins
        (0, 2, "5", 2),  # then the CPUs Ray gave the trial
        (0, None, "5", 5),  # then OMP_NUM_THREADS
        (0, None, "", "cores"),  # else every core
        (0, None, "x", "cores"),  # an unreadable one is not a number of threads
        (0, None, "0", "cores"),
    ],
)
def test_a_trial_s_threads_come_from_its_config_its_cpus_omp_num_threads_then_the_cores(configured, given, omp, expected, monkeypatch):
    import os

    from orchestrator.trial.run import trial_threads

    monkeypatch.setenv("OMP_NUM_THREADS", omp)
    cfg = config()
    cfg = cfg.replace(train=cfg.train.replace(threads=configured))
    cores = len(os.sched_getaffinity(0))
    assert trial_threads(cfg, SimpleNamespace(num_threads=given)) == (cores if expected == "cores" else expected)
