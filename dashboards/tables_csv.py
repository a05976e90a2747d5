"""The CSV table of a `Comparison`: one line per configuration, machine-readable; per metric the
mean, std, 95% Student's t interval, n, delta against the baseline (absolute and relative), p
and best, then the 95% bootstrap interval of the mean, the bootstrap interval of the mean
paired difference, the Holm-adjusted p, the power of the paired test and the seeds needed for
80% power. A machine format: it takes no sections of `dashboards.sections.SECTIONS` (which lay
out tables for people); its columns are a layout of their own, one row per configuration."""

from __future__ import annotations

import csv
import io

from .comparison import Comparison


def csv_text(comp: Comparison) -> str:
    """One line per configuration; per metric: mean, std, ci95_lo, ci95_hi (Student's t), n, delta,
    delta_rel_pct, p, best, boot95_lo, boot95_hi, delta_boot95_lo, delta_boot95_hi, p_holm, power,
    seeds_needed."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    fields = (
        "mean",
        "std",
        "ci95_lo",
        "ci95_hi",
        "n",
        "delta",
        "delta_rel_pct",
        "p",
        "best",
        "boot95_lo",
        "boot95_hi",
        "delta_boot95_lo",
        "delta_boot95_hi",
        "p_holm",
        "power",
        "seeds_needed",
    )
    w.writerow(list(comp.axes) + ["n_finished", "status", "run_ids"] + [f"{m.key}.{f}" for m in comp.metrics for f in fields])

    def num(x: float | None) -> str:
        return "" if x is None else repr(float(x))

    for row in comp.rows:
        cells = [row.axes[p] for p in comp.axes] + [row.n, row.status, " ".join(r.run_id for r in row.live_runs())]
        for m in comp.metrics:
            st, d = row.stats[m.key], row.deltas.get(m.key)
            cells += [
                num(st.mean),
                num(st.std),
                num(st.lo),
                num(st.hi),
                st.n,
                num(d.diff if d else None),
                num(d.rel if d else None),
                num(d.p if d else None),
                int(m.key in row.best),
                num(st.boot_lo),
                num(st.boot_hi),
                num(d.boot_lo if d else None),
                num(d.boot_hi if d else None),
                num(d.p_holm if d else None),
                num(d.power if d else None),
                "" if d is None or d.seeds_needed is None else d.seeds_needed,
            ]
        w.writerow(cells)
    return buf.getvalue()
