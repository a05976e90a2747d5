"""The end-of-sweep table: one row per trial with the headline metrics (console and summary.md)."""

from __future__ import annotations

SUMMARY = ("val_loss", "val_ppl", "first_token_attn", "sink_ratio", "gate_score_mean", "max_activation", "loss_spikes", "tokens_per_s")


def summary_rows(outcome) -> list[dict]:
    """One row per trial with the headline metrics (the same columns for every row)."""
    extra = {"bbc/copy_acc": "copy_acc"} if any("bbc/copy_acc" in r.metrics for r in outcome.rows) else {}
    rows = []
    for r in outcome.rows:
        row = {"trial": r.name, "status": r.status}
        for key in SUMMARY:
            row[key] = r.metrics.get(key)
        for key, col in extra.items():
            row[col] = r.metrics.get(key)
        rows.append(row)
    return rows


def summary_markdown(outcome) -> str:
    rows = summary_rows(outcome)
    if not rows:
        return f"# {outcome.name}\n\nno trials\n"
    cols = list(rows[0])
    lines = [f"# sweep {outcome.name}", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in rows:
        lines.append("| " + " | ".join("-" if row[c] is None else (f"{row[c]:.4g}" if isinstance(row[c], float) else str(row[c])) for c in cols) + " |")
    reasons = [f"- {r.name}: {r.reason}" for r in outcome.rows if r.reason]
    if reasons:
        lines += ["", "## notes", *reasons]
    return "\n".join(lines) + "\n"
