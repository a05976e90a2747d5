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
from orchestrator.core.parts import Cell, Figure, Lines, Table, Text


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


def test_the_comparisons_tables_are_sections_each_format_walks_once():
    """Every table of the comparison comes from `SECTIONS` (none written by a format module), in
    the formats each section names: the terminal leaves out the intervals, LaTeX has the paper's."""
    names = [s.name for s in sections.SECTIONS]
    assert names[:3] == ["configurations", "ci", "deltas"] and names[-2:] == ["ladder", "plots"]
    comp = _comparison()
    term, md, tex, page = tables.terminal(comp), tables.markdown(comp), tables.latex(comp), html.render(comp)
    for s in sections.SECTIONS:
        title = s.heading(comp)
        if not s.parts(comp, ()):
            continue
        assert (title in term) == ("terminal" in s.formats), title
        assert (f"## {title}" in md) == ("markdown" in s.formats), title
        assert (f'<section id="{s.name}">' in page) == ("html" in s.formats), title
    assert tex.count("\\begin{tabular}") == 2  # the configurations and the Δ
    assert "Δ against the baseline (no gate, softmax attention; other axes equal)" in md


def test_a_table_of_values_in_each_format():
    """Key columns left, values right; `mean ± std`, a Δ's p values and an emphasised cell in each
    format's way; the terminal's short heads with their legend, the HTML's tooltips."""
    rows = [
        ["none", Cell("1.50", spread="0.02"), Cell("-0.3", detail="p <0.001", strong=True, note="tip <b>")],
        ["G1|x", "2", "–"],
    ]
    table = Table(
        "",
        ["model.gate", "val_ppl", "delta"],
        rows,
        "legend",
        keys=1,
        short=["gate", "PPL", "Δ"],
        abbrev="PPL = val_ppl",
        strong="significant",
    )
    term = writers.terminal([table], "Title", width=100).splitlines()
    assert term[:2] == ["", "Title"] and term[3].split() == ["gate", "PPL", "Δ"]
    assert term[5] == "none  1.50±0.02  -0.3, p <0.001*" and term[6] == "G1|x          2                –"
    assert term[7:] == ["*: significant legend", "PPL = val_ppl"]
    md = writers.markdown("Title", [table])
    assert (
        md[2] == "| model.gate | val_ppl     | delta                 |" and md[3] == "|------------|------------:|----------------------:|"
    )
    assert md[4] == "| none       | 1.50 ± 0.02 | **-0.3, p &lt;0.001** |" and md[5].startswith("| G1\\|x ")
    assert md[-1] == "**bold**: significant legend"
    tex = writers.latex([table], lambda x: x.replace("|", r"\textbar{}").replace("<", r"\textless{}"), "Cap")
    assert "\\caption{Cap}" in tex and "\\begin{tabular}{lrr}" in tex
    assert r"none & 1.50{\scriptsize$\pm$0.02} & \textbf{-0.3} {\scriptsize(p \textless{}0.001)} \\" in tex
    page = "\n".join(writers.html("t", "Title", [table], html.esc, lambda f: ""))
    assert '<td class="num best" title="tip &lt;b&gt;"><strong>-0.3</strong><br>p &lt;0.001</td>' in page
    assert "<td>none</td>" in page and "highlighted: significant legend Hover a cell for more." in page


def test_a_wide_table_wraps_into_blocks_repeating_the_keys_and_long_cells_wrap():
    head = ["arm"] + [f"metric{i}" for i in range(12)]
    rows = [["G1-elementwise", *[f"{i}.000±0.001" for i in range(12)]], ["none", *["–"] * 12]]
    lines = writers.term_table(head, rows, 1, 60)
    assert max(map(len, lines)) <= 60 and sum(line.startswith("arm ") for line in lines) >= 3
    assert all(line.split()[0] in ("arm", "G1-elementwise", "none") for line in lines if line and not line.startswith("-"))
    assert writers.term_table(head, rows, 1, None)[0].count("metric") == 12  # no width: one block
    assert writers.term_table(head, [], 1, 60) == []
    long = writers.term_table(["run", "reason"], [["r1", "x " * 80], ["r2", "\x1b[2J"]], 1, 40)
    assert max(map(len, long)) <= 40 and len(long) > 4 and "\\x1b[2J" in "\n".join(long)
    only_keys = writers.term_table(["env", "names"], [["a", ", ".join(["run-name"] * 30)]], 2, 50)
    assert max(map(len, only_keys)) <= 50 and "run-name" in only_keys[-1]
    runs = writers.term_table(["run", "state", "reason", "run id"], [["r" * 30, "failed", "why " * 20, "0" * 32]], 3, 100)
    assert max(map(len, runs)) <= 100 and "0" * 32 in "\n".join(runs)  # key columns too wide: the widest one wraps
