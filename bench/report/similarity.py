"""Liu et al. 2019 Fig. 2: per item, the cosine similarity to its nearest same-class and other-class
item, and the scatter of the two (PNG bytes)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from bench.report.figures import (
    OTHER_CLASS_COLOUR,
    SAME_CLASS_COLOUR,
    figure_style,
    png_bytes,
    subplots,
)

SIMILARITY_BLOCK = 2048


def similarity_scatter(embeddings: np.ndarray, labels: np.ndarray) -> pd.DataFrame:
    """Per point, the cosine similarity to its most similar other point of its class (same) and
    of another class (different); correct when same > different, i.e. when its nearest
    neighbour would classify it rightly (Liu et al. 2019 Sec. 2.4).

    A missing side is NaN: a class's only member has no same value and is never correct; with a
    single class there is no different value and every point that has a same value is correct.
    Ties count as wrong.
    """
    x = np.asarray(embeddings, dtype=np.float64)
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), np.finfo(float).tiny)
    labels = np.asarray(labels)
    same = np.full(len(x), -np.inf)
    different = np.full(len(x), -np.inf)
    for start in range(0, len(x), SIMILARITY_BLOCK):
        rows = np.arange(start, min(start + SIMILARITY_BLOCK, len(x)))
        sim = x[rows] @ x.T
        sim[np.arange(len(rows)), rows] = -np.inf  # the point itself
        is_same = labels[rows, None] == labels[None, :]
        same[rows] = np.where(is_same, sim, -np.inf).max(axis=1, initial=-np.inf)
        different[rows] = np.where(is_same, -np.inf, sim).max(axis=1, initial=-np.inf)
    correct = same > different
    return pd.DataFrame(
        {
            "same": np.where(np.isinf(same), np.nan, same),
            "different": np.where(np.isinf(different), np.nan, different),
            "correct": correct,
        }
    )


def similarity_scatter_figure(train_df: pd.DataFrame, test_df: pd.DataFrame) -> bytes:
    """Training and test panels of different- against same-class similarity (Liu et al. 2019 Fig.
    2): points below the diagonal (cyan) are closer to their own class."""
    values = pd.concat([train_df, test_df])[["same", "different"]].to_numpy(dtype=float)
    values = values[np.isfinite(values)]
    lo, hi = (values.min(), values.max()) if len(values) else (-1.0, 1.0)
    pad = 0.05 * max(hi - lo, 1e-3)
    lims = (lo - pad, hi + pad)
    with figure_style():
        fig, axes = subplots(2)
        for ax, df, split in zip(axes, (train_df, test_df), ("training", "test"), strict=True):
            colours = np.where(df["correct"].to_numpy(bool), SAME_CLASS_COLOUR, OTHER_CLASS_COLOUR)
            ax.scatter(df["same"], df["different"], c=colours, s=6, linewidths=0)
            ax.plot(lims, lims, color="black", linewidth=0.8)
            share = df["correct"].mean() if len(df) else float("nan")
            ax.set(xlim=lims, ylim=lims, aspect="equal")
            ax.set(xlabel="similarity to closest same class", ylabel="to closest other class")
            ax.set_title(f"{split}: {100 * share:.1f}% closest to the same class")
        return png_bytes(fig)
