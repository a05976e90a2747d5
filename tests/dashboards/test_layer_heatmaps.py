"""Per-layer heat maps (dashboards.layer_heatmaps): histories averaged over seeds per step and
layer, missing and non-finite points as NaN, the ladder's per-rung variant, the PNG; and, on the
real sweep store of tests/dashboards/conftest.py, the report's section from MLflow's histories."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from dashboards.layer_heatmaps import HEATMAP_FILE, Heat, arm_heat, draw, layer_history, rung_heat
from dashboards.records import RunRecord


@dataclass
class Point:
    step: int
    value: float
    timestamp: int = 0


class FakeClient:
    """`get_metric_history` over a dict: (run_id, key) -> [(step, value)]."""

    def __init__(self, history: dict[tuple[str, str], list[tuple[int, float]]]):
        self.history = history
        self.calls: list[tuple[str, str]] = []

    def get_metric_history(self, run_id: str, key: str):
        self.calls.append((run_id, key))
        return [Point(s, v) for s, v in self.history.get((run_id, key), [])]


def run(run_id: str, layers: int, gated: bool = True) -> RunRecord:
    metrics = {f"first_token_attn/layer_{i}": 0.0 for i in range(layers)}
    if gated:
        metrics.update({f"gate_score_mean/layer_{i}": 0.0 for i in range(layers)})
    return RunRecord(run_id, run_id, "FINISHED", "finished", "", {}, metrics, {}, 0, 1, "0")


def test_history_is_the_mean_over_seeds_at_each_step_and_layer():
    cl = FakeClient(
        {
            ("a", "gate_score_mean/layer_0"): [(100, 0.2), (200, 0.1)],
            ("b", "gate_score_mean/layer_0"): [(100, 0.4), (200, float("nan"))],
            ("a", "gate_score_mean/layer_1"): [(100, 1.5), (200, 1.7)],
            ("b", "gate_score_mean/layer_1"): [(100, 1.3)],
        }
    )
    steps, grid = layer_history(cl, [run("a", 2), run("b", 2)], "gate_score_mean")
    assert steps == [100, 200]
    assert grid[0] == pytest.approx([0.3, 0.1])  # the NaN of seed b is not averaged in
    assert grid[1] == pytest.approx([1.4, 1.7])  # seed b has no point at 200
    assert ("a", "gate_score_mean/layer_2") not in cl.calls  # only the layers the runs logged


def test_an_ungated_arm_has_first_token_attention_only_and_steps_are_shared():
    cl = FakeClient({("u", "first_token_attn/layer_0"): [(50, 0.7), (100, 0.8)], ("u", "gate_score_mean/layer_0"): [(50, 0.5)]})
    heat = arm_heat(cl, "none", [run("u", 1, gated=False)])
    assert heat is not None and set(heat.grids) == {"first_token_attn"} and heat.columns == ["50", "100"]
    gated = arm_heat(
        FakeClient({("g", "first_token_attn/layer_0"): [(50, 0.1), (100, 0.1)], ("g", "gate_score_mean/layer_0"): [(100, 0.3)]}),
        "G1",
        [run("g", 1)],
    )
    assert gated.columns == ["50", "100"]
    assert math.isnan(gated.grids["gate_score_mean"][0][0]) and gated.grids["gate_score_mean"][0][1] == 0.3
    assert arm_heat(FakeClient({}), "none", [run("x", 0, gated=False)]) is None


def test_rung_variant_lays_layers_against_rungs():
    heat = rung_heat("G1", {"r0": {"gate_score_mean": [0.2, 0.4]}, "r1": {"gate_score_mean": [0.1], "first_token_attn": [0.05, 0.06]}})
    assert heat.columns == ["r0", "r1"]
    assert heat.grids["gate_score_mean"][0] == [0.2, 0.1]
    assert heat.grids["gate_score_mean"][1][0] == 0.4 and math.isnan(heat.grids["gate_score_mean"][1][1])
    assert math.isnan(heat.grids["first_token_attn"][0][0]) and heat.grids["first_token_attn"][1][1] == 0.06


def test_draw_writes_a_png_with_unbounded_gates_and_missing_panels(tmp_path):
    heats = [
        Heat("none", ["100", "200"], {"first_token_attn": [[0.7, 0.8], [0.5, math.nan]]}),
        Heat("G1-softplus", ["100", "200"], {"first_token_attn": [[0.1, 0.1], [0.1, 0.1]], "gate_score_mean": [[1.8, 2.5], [0.4, 0.3]]}),
    ]
    path = draw(heats, tmp_path / HEATMAP_FILE)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5_000
    rung = draw([rung_heat("G1", {"r0": {"gate_score_mean": [0.2]}})], tmp_path / "rungs.png", xlabel="rung")
    assert rung.stat().st_size > 2_000


@pytest.mark.slow
def test_the_report_draws_them_from_mlflow_histories(store, tmp_path):
    from dashboards.report import build_report
    from orchestrator.tracking import client

    report = build_report(store.uri, "cmp", out_dir=tmp_path / "r", log=False)
    made = {p.name: c for p, c in report.plots}
    assert HEATMAP_FILE in made and made[HEATMAP_FILE].startswith("Per layer")
    assert (tmp_path / "r" / HEATMAP_FILE).stat().st_size > 5_000
    # the values drawn are MLflow's own: recompute one arm's grid from the client
    cl = client(store.uri)
    row = next(r for r in report.comparison.rows if r.axes.get("model.gate") == "G1-elementwise" and r.n)
    runs = list(row.counted.values())
    steps, grid = layer_history(cl, runs, "gate_score_mean")
    assert steps and len(grid) == 1  # bigram-1l: one layer, an evaluation every 15 steps
    direct = [[p.value for p in cl.get_metric_history(r.run_id, "gate_score_mean/layer_0") if p.step == steps[-1]][0] for r in runs]
    assert grid[0][-1] == pytest.approx(sum(direct) / len(direct))
    assert "report.md" in {p.name for p in (tmp_path / "r").iterdir()}
    assert HEATMAP_FILE in (tmp_path / "r" / "report.md").read_text()
