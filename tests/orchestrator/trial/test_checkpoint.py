"""The checkpoint callback (save/load through the engine, COMPLETE after the flush, pruning, disk
failures) and the checkpoint format."""

from __future__ import annotations

import json

import pytest
import torch

from orchestrator.tracking.outcomes import TrialFailed
from orchestrator.trial import checkpoint as ckpt
from orchestrator.trial.callbacks.checkpoint import Checkpointer

from .fakes import FakeEngine, FakeLogging, Recorder, config, trainer


def test_checkpoints_are_marked_whole_after_the_flush_pruned_and_resumed(tmp_path):
    cfg = config(steps=6, checkpoint_every=2, keep_checkpoints=2)
    log = FakeLogging(tmp_path)
    rec = Recorder()
    t = trainer(cfg, [Checkpointer(tmp_path, resume=True, keep=2, config_hash="h", tracker=log), rec])
    t.run()
    # each flush happened before its checkpoint counted as whole (the newest whole one is the previous)
    assert [c for c in log.calls if c[0] == "flush"] == [("flush", 60, None), ("flush", 60, "step2"), ("flush", 60, "step4")]
    assert sorted(p.name for p in ckpt.checkpoint_dir(tmp_path).iterdir()) == ["step4", "step6"]
    marker = json.loads((ckpt.checkpoint_dir(tmp_path) / "step6" / ckpt.COMPLETE).read_text())
    assert marker["step"] == 6 and "state.pt" in marker["files"]  # the manifest, written last
    state = torch.load(ckpt.checkpoint_dir(tmp_path) / "step6" / "state.pt", weights_only=True)
    assert state["step"] == 6 and state["config_hash"] == "h" and "recorder" in state

    rec2 = Recorder()
    again = trainer(cfg.replace(train=cfg.train.replace(steps=8)), [Checkpointer(tmp_path, resume=True, keep=2, config_hash="h"), rec2])
    again.run()
    assert rec2.events[1] == ("after_resume", 6, 6) and rec2.loaded == state["recorder"]
    assert [e[1] for e in rec2.events if e[0] == "on_step"] == [7, 8]


def test_without_resume_or_a_whole_checkpoint_training_starts_at_zero(tmp_path):
    whole, half = tmp_path / "whole", tmp_path / "half"
    trainer(config(steps=2, checkpoint_every=2), [Checkpointer(whole, resume=False, keep=1, config_hash="h")]).run()
    (ckpt.checkpoint_dir(half) / "step2").mkdir(parents=True)  # half-written: no COMPLETE
    for run_dir, resume in ((whole, False), (half, True)):
        rec = Recorder()
        trainer(config(), [Checkpointer(run_dir, resume=resume, keep=1, config_hash="h"), rec]).start()
        assert rec.events[1] == ("after_resume", 0, 0)


def test_a_checkpoint_that_cannot_be_written_is_a_disk_failure_and_leaves_nothing(tmp_path):
    engine = FakeEngine()
    engine.fail_save = OSError(28, "No space left on device")
    t = trainer(config(checkpoint_every=2), [Checkpointer(tmp_path, resume=False, keep=1, config_hash="h")], engine=engine)
    with pytest.raises(TrialFailed, match=r"checkpoint step2 could not be written .*No space left on device.*file-size limit") as err:
        t.run()
    assert err.value.kind == "disk"
    assert not (ckpt.checkpoint_dir(tmp_path) / "step2").exists()


def test_an_unreadable_checkpoint_fails_the_trial(tmp_path):
    (ckpt.checkpoint_dir(tmp_path) / "step2").mkdir(parents=True)
    ckpt.mark_complete(tmp_path, 2)
    t = trainer(config(), [Checkpointer(tmp_path, resume=True, keep=1, config_hash="h")])
    with pytest.raises(TrialFailed, match="checkpoint step2 in .* could not be loaded"):
        t.start()


def test_only_the_main_process_marks_and_prunes(tmp_path):
    log = FakeLogging(tmp_path)
    t = trainer(config(checkpoint_every=2), [Checkpointer(tmp_path, resume=False, keep=1, config_hash="h", is_main=False, tracker=log)])
    t.run()
    assert ckpt.latest_checkpoint(tmp_path) is None and log.calls == []
    assert sorted(p.name for p in ckpt.checkpoint_dir(tmp_path).iterdir()) == ["step2", "step4"]


def test_checkpoint_format_trusts_only_complete_folders(tmp_path):
    root = ckpt.checkpoint_dir(tmp_path)
    for step in (2, 4, 6, 8):
        (root / ckpt.tag(step)).mkdir(parents=True)
    for step in (2, 4, 6):
        ckpt.mark_complete(tmp_path, step)
    (root / "stepx").mkdir()
    assert ckpt.latest_checkpoint(tmp_path) == "step6"  # step8 is half-written
    (root / "step5").mkdir()  # an older half-written leftover
    ckpt.prune_checkpoints(tmp_path, keep=2)
    assert sorted(p.name for p in root.iterdir()) == ["step4", "step6", "step8", "stepx"]
