"""PNG plots of one trial, logged as MLflow artifacts: loss curve with spikes, first-token
attention per layer, one attention map, and the gate-score histogram."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def loss_curve(steps: list[int], losses: list[float], spikes: list[dict], path: Path, title: str = "") -> Path:
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(steps, losses, lw=0.8, label="train loss")
    if losses:
        ema, smooth = None, []
        for v in losses:
            ema = v if ema is None else 0.9 * ema + 0.1 * v
            smooth.append(ema)
        ax.plot(steps, smooth, lw=1.4, label="0.9-EMA")
    marked = [e for e in spikes if e.get("rule") in ("sigma", "ema")]
    if marked:
        ax.scatter([e["step"] for e in marked], [e["loss"] for e in marked], color="red", zorder=3, s=18, label="spikes")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats)")
    ax.set_title(title or "training loss")
    ax.legend(fontsize=8)
    return _save(fig, path)


def first_token_per_layer(values: list[float], uniform: float, path: Path, title: str = "") -> Path:
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.bar(range(len(values)), values, color="tab:blue")
    ax.axhline(uniform, color="gray", ls="--", lw=1, label=f"uniform ({uniform:.3f})")
    ax.set_xlabel("layer")
    ax.set_ylabel("attention on first token")
    ax.set_ylim(0, 1)
    ax.set_title(title or "first-token attention per layer")
    ax.legend(fontsize=8)
    return _save(fig, path)


def attention_map(attn_TS, path: Path, title: str = "") -> Path:
    fig, ax = plt.subplots(figsize=(4.2, 3.8))
    im = ax.imshow(attn_TS.numpy(), cmap="viridis", vmin=0, vmax=1, aspect="auto")
    ax.set_xlabel("key position")
    ax.set_ylabel("query position")
    ax.set_title(title or "attention map")
    fig.colorbar(im, ax=ax, fraction=0.046)
    return _save(fig, path)


def gate_histogram(hist: list[list[int]], path: Path, title: str = "") -> Path:
    fig, ax = plt.subplots(figsize=(5, 3.2))
    bins = len(hist[0])
    centers = [(i + 0.5) / bins for i in range(bins)]
    for i, counts in enumerate(hist):
        total = max(sum(counts), 1)
        ax.plot(centers, [c / total for c in counts], label=f"layer {i}")
    ax.set_xlabel("gate score")
    ax.set_ylabel("fraction")
    ax.set_yscale("log")
    ax.set_title(title or "gate-score histogram")
    ax.legend(fontsize=7)
    return _save(fig, path)
