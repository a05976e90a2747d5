"""The end-of-sweep summary table (orchestrator.launch.summary) on plain rows, no store."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from orchestrator.core import metrics as registry
from orchestrator.launch.summary import summary_markdown, summary_rows


@dataclass
class Row:
    """Shaped like the launcher's trial rows: extra fields are ignored."""

    name: str
    status: str
    metrics: dict = field(default_factory=dict)
    reason: str = ""
    config_hash: str = "abc"


def rows() -> list[dict]:
    return [
        asdict(r)
        for r in (
            Row(
                "none-s0",
                "finished",
                {
                    "val_loss": 1.79812345,
                    "val_ppl": 6.0,
                    "first_token_attn": 0.75,
                    "tokens_per_s": 12345.6,
                    "bbc/copy_acc": 0.5,
                    "loss_spikes": 0,
                },
            ),
            Row("G1-s0", "finished", {"val_loss": 1.8, "gate_score_mean": 0.134}),
            Row("none-lr1e10", "failed", reason="loss is nan at step 3 (micro-batch 0); training diverged"),
        )
    ]


def test_rows_have_the_registry_default_columns():
    table = summary_rows(rows())
    logged = {k for r in rows() for k in r["metrics"]}
    cols = registry.default_columns(logged)  # the report's and dashboards.results' defaults too
    assert list(table[0]) == ["trial", "status", *cols]
    assert table[2]["val_loss"] is None and table[1]["gate_score_mean"] == 0.134
    plain = summary_rows([{"name": "a", "status": "finished", "metrics": {"val_ppl": 1.0}}])
    assert "gate_score_mean" not in plain[0] and "bbc/copy_acc" not in plain[0] and "val_ppl" in plain[0]


def test_markdown_table_and_notes():
    text = summary_markdown("quick", rows())
    lines = text.splitlines()
    cols = registry.default_columns({k for r in rows() for k in r["metrics"]})
    assert lines[0] == "# sweep quick" and lines[2].startswith("| trial | status | val_ppl | first_token_attn |")
    assert lines[3] == "|" + "---|" * (2 + len(cols))
    assert "| none-s0 | finished | 6 | 0.75 |" in text and "1.235e+04" in text
    assert "| none-lr1e10 | failed | - |" in text
    assert lines[-2:] == ["## notes", "- none-lr1e10: loss is nan at step 3 (micro-batch 0); training diverged"]
    assert summary_markdown("empty", []) == "# empty\n\nno trials\n"
