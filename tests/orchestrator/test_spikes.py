"""Loss-spike rules on hand-made loss sequences."""

from __future__ import annotations

from orchestrator.spec.train import SpikeConfig
from orchestrator.trial.spikes import SpikeDetector


def feed(det, losses, start=1):
    for i, v in enumerate(losses, start):
        det.update(i, v, grad_norm=1.0 + 0.01 * (i % 3), batch={"step": i})


def test_sigma_and_ema_rules_fire_on_a_spike_only():
    det = SpikeDetector(SpikeConfig(window=20, k=6, delta=0.3, warmup=0))
    flat = [2.0 + 0.01 * ((i * 7) % 5) for i in range(40)]
    feed(det, flat)
    assert det.events == []
    det.update(41, 3.0, grad_norm=1.0, batch={"step": 41})
    rules = {e["rule"] for e in det.events}
    assert rules == {"sigma", "ema"}
    assert all(e["step"] == 41 and e["batch"] == {"step": 41} for e in det.events)
    assert det.summary()["loss_spikes"] == 1 and det.summary()["loss_spikes/ema"] == 1


def test_warmup_and_short_history_do_not_count():
    det = SpikeDetector(SpikeConfig(window=10, warmup=5, delta=0.1))
    feed(det, [5.0, 1.0, 4.0, 0.5, 3.0])  # wild early losses: inside warmup
    assert det.events == []
    det2 = SpikeDetector(SpikeConfig(window=10, warmup=0, delta=100))
    feed(det2, [1.0, 1.0, 9.0])  # the sigma rule needs a full window
    assert det2.count("sigma") == 0


def test_state_round_trip():
    det = SpikeDetector(SpikeConfig(window=8, warmup=0))
    feed(det, [1.0] * 8 + [1.01] * 3 + [4.0])
    other = SpikeDetector(SpikeConfig(window=8, warmup=0))
    other.load_state_dict(det.state_dict())
    assert other.state_dict() == det.state_dict()
    det.update(13, 1.0)
    other.update(13, 1.0)
    assert other.state_dict() == det.state_dict()
