"""The report built by sections: a section registered in `dashboards.sections.SECTIONS` shows in
every format through one part writer per format; the writers escape what they write and leave
out what a format cannot show; the plot module takes its names from the registries."""

from __future__ import annotations

from pathlib import Path

import pytest

from dashboards import html, sections, tables
from dashboards.records import SweepRuns, make_record
from dashboards.sections import Section, writers
from dashboards.sections import plots as plot_section
from dashboards.stats import compare
from orchestrator.core.parts import Figure, Lines, Table, Text


def _comparison():
    runs = []
    for i, (gate, seed, loss) in enumerate([("none", 0, 3.1), ("none", 1, 3.2), ("G1-elementwise", 0, 2.9), ("G1-elementwise", 1, 2.95)]):
        rec = make_record(
            f"r{i}", f"{gate}-s{seed}", "FINISHED", params={}, metrics={"val_loss": loss}, tags={}, start_time=i, end_time=i + 1,
            experiment_id="1", artifact_uri="",
        )  # fmt: skip
        rec.axes = {"model.gate": gate, "train.seed": str(seed)}
        runs.append(rec)
    parent = make_record("p", "s", "FINISHED", params={}, metrics={}, tags={}, start_time=0, end_time=1, experiment_id="1", artifact_uri="")
    return compare(SweepRuns("s", "sqlite:///x.db", "1", "e", parent, runs, 1, axes=["model.gate", "train.seed"]))


HOSTILE = "a|b <script>x</script> 50% ok"


def _hostile_parts(comp, figures):
    return [
        Text([f"lead {HOSTILE}"]),
        Table(f"table {HOSTILE}", ["col", "n"], [[HOSTILE, "1"]], f"legend {HOSTILE}"),
        Lines("list", [HOSTILE]),
    ]


@pytest.fixture
def extra_section(monkeypatch):
    monkeypatch.setattr(sections, "SECTIONS", [*sections.SECTIONS, Section("extra", "Extra section", _hostile_parts)])
    for module in ("dashboards.tables_terminal", "dashboards.tables_markdown", "dashboards.tables_latex", "dashboards.html"):
        monkeypatch.setattr(f"{module}.SECTIONS", sections.SECTIONS)


def test_a_registered_section_shows_in_every_format(extra_section):
    comp = _comparison()
    term = tables.terminal(comp)
    assert "lead a|b <script>" in term and "table a|b" in term and "  (legend a|b" in term
    md = tables.markdown(comp)
    assert "## Extra section" in md and "### table a|b" in md and "| a\\|b &lt;script&gt;x" in md and "- a|b" in md
    tex = tables.latex(comp)
    assert "\\caption{table a\\textbar{}b \\textless{}script" in tex and "% list: a\\textbar{}b" in tex
    page = html.render(comp)
    assert '<section id="extra"><h2>Extra section</h2>' in page
    assert "<script>" not in page.split("<style>")[1] and "&lt;script&gt;" in page


def test_a_section_with_nothing_to_show_writes_nothing():
    assert writers.terminal([]) == "" and writers.markdown("T", []) == [] and writers.latex([], str) == ""
    assert writers.html("n", "T", [], str, lambda f: "img") == []
    fig = [Figure(Path("/x/plot.png"), "cap")]
    assert writers.terminal(fig) == "" and writers.latex(fig, str) == ""
    assert writers.markdown("Plots", fig) == ["## Plots", "", "![cap](plot.png)", "", "*cap*", ""]
    assert writers.html("plots", "Plots", fig, str, lambda f: f"<img {f.caption}>") == [
        '<section id="plots"><h2>Plots</h2>',
        "<img cap>",
        "</section>",
    ]


def test_the_plot_section_reads_its_names_from_the_registry_and_the_gate_config():
    from gatedmodels.config import GateConfig
    from orchestrator.core import metrics as registry

    assert GateConfig(position="G1").label == plot_section.PAPER_GATE
    assert registry.get("train/loss").name == plot_section.TRAIN_LOSS
    assert len(set(plot_section.PLOT_FILES)) == len(plot_section.PLOT_FILES)
    comp = _comparison()
    rows, note = plot_section.plotted_rows(comp, limit=1)
    assert [r.axes["model.gate"] for r in rows] == ["none"] and "1 of 2 configurations" in note
