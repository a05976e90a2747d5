"""Configs: strict loading, round trips, the paper's undefined combinations rejected."""

from __future__ import annotations

import pytest

from gatedmodels import ConfigError, GateConfig, ModelConfig


def test_round_trip_through_plain_dicts():
    cfg = ModelConfig.preset("small", n_layers=3, gate=dict(position="G2", granularity="headwise"))
    data = cfg.to_dict()
    assert ModelConfig.from_dict(data) == cfg
    assert cfg.flatten()["gate.position"] == "G2"
    assert all(not isinstance(v, dict) for v in cfg.flatten().values())


def test_preset_then_overrides():
    cfg = ModelConfig.from_dict({"size": "tiny", "n_layers": 5, "gate": {"position": "G1"}})
    assert (cfg.n_layers, cfg.d_model, cfg.gate.position) == (5, 64, "G1")


@pytest.mark.parametrize(
    "gate, field",
    [
        (dict(position="G5", granularity="headwise"), "granularity"),
        (dict(position="G5", sharing="head_shared"), "sharing"),
        (dict(position="G1", mode="additive"), "activation"),
        (dict(position="G1", mode="additive", activation="silu", input_dependent=False), "mode"),
        (dict(position="G2", kind="rmsnorm"), "position"),
        (dict(position="G7"), "position"),
        (dict(position="G1", activation="tanh"), "activation"),
    ],
)
def test_undefined_combinations_raise_valueerror_naming_the_field(gate, field):
    with pytest.raises(ValueError) as err:
        GateConfig(**gate)
    assert isinstance(err.value, ConfigError)
    assert any(issue.path == field for issue in err.value.issues), str(err.value)
    assert "allowed" in str(err.value)


def test_all_problems_reported_at_once_with_paths():
    with pytest.raises(ConfigError) as err:
        ModelConfig.from_dict({"size": "tiny", "n_heads": "four", "gate": {"positon": "G1", "mode": "sum"}, "bogus": 1})
    paths = {i.path for i in err.value.issues}
    assert paths == {"n_heads", "gate.positon", "gate.mode", "bogus"}
    assert "did you mean 'position'" in str(err.value)


def test_bad_preset_and_gqa_rule():
    with pytest.raises(ConfigError, match="size.*allowed: custom, bigram-1l"):
        ModelConfig.from_dict({"size": "huge"})
    with pytest.raises(ConfigError, match="n_kv_heads.*must divide"):
        ModelConfig.preset("tiny", n_kv_heads=3)


def test_yaml_style_float_strings_are_accepted():
    cfg = ModelConfig.from_dict({"size": "tiny", "norm_eps": "1e-5"})
    assert cfg.norm_eps == 1e-5
    with pytest.raises(ConfigError, match="expected a number"):
        ModelConfig.from_dict({"size": "tiny", "norm_eps": "tiny"})
    with pytest.raises(ConfigError, match="expected an integer"):
        ModelConfig.from_dict({"size": "tiny", "n_layers": True})


def test_normalized_gate_and_labels():
    assert GateConfig(position="none", granularity="headwise").normalized() == GateConfig()
    assert GateConfig(position="G1", kind="silu", granularity="headwise").normalized() == GateConfig(position="G1", kind="silu")
    labels = [
        (GateConfig(), "none"),
        (GateConfig(position="G1"), "G1-elementwise"),
        (GateConfig(position="G1", granularity="headwise", sharing="head_shared"), "G1-headwise-shared"),
        (GateConfig(position="G1", mode="additive", activation="silu"), "G1-elementwise-additive"),
        (GateConfig(position="G1", input_dependent=False), "G1-elementwise-const"),
        (GateConfig(position="G5"), "G5"),
        (GateConfig(position="G1", kind="rmsnorm"), "G1-rmsnorm"),
    ]
    for gate, label in labels:
        assert gate.label == label


def test_field_docs_are_extracted():
    docs = GateConfig.field_docs()
    assert "SDPA output" in docs["position"]
    assert set(docs) == {f for f in GateConfig.__dataclass_fields__}
