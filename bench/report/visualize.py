"""`nngk-bench visualize RUN_DIR`: one run's generalization views, from its saved embeddings."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from bench.report import figures, similarity, tsne
from bench.runs import store
from bench.util.atomic import atomic_write_bytes


def load_embeddings(run_dir: Path, name: str) -> tuple[np.ndarray, np.ndarray]:
    path = Path(run_dir) / name
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found; visualize needs a finished run of this "
            f"version (with {store.EMBEDDINGS} and {store.TRAIN_EMBEDDINGS})"
        )
    saved = np.load(path)
    return saved["embeddings"], saved["labels"]


def subsample(x: np.ndarray, labels: np.ndarray, n: int, seed: int = 0):
    """At most n points, drawn with a fixed seed (t-SNE here is O(n^2))."""
    if len(x) <= n:
        return x, labels
    keep = np.sort(np.random.default_rng(seed).choice(len(x), n, replace=False))
    return x[keep], labels[keep]


def visualize_run(run_dir: Path, out: Path, max_points: int = 2000) -> list[Path]:
    """tsne.png (joint t-SNE, three panels), similarity.png (scatter), and, for NNGK runs,
    centres.png (Fig. 4b, 4c from the history)."""
    train, train_labels = subsample(*load_embeddings(run_dir, store.TRAIN_EMBEDDINGS), max_points)
    test, test_labels = subsample(*load_embeddings(run_dir, store.EMBEDDINGS), max_points)
    files = {
        "tsne.png": tsne.joint_tsne(train, train_labels, test, test_labels),
        "similarity.png": similarity.similarity_scatter_figure(
            similarity.similarity_scatter(train, train_labels),
            similarity.similarity_scatter(test, test_labels),
        ),
    }
    history = Path(run_dir) / store.HISTORY
    if history.is_file():
        table = pd.read_csv(history)
        if "mean_centre_distance" in table:
            files["centres.png"] = figures.centre_statistics(table)
    written = []
    for name, data in files.items():
        atomic_write_bytes(Path(out) / name, data)
        written.append(Path(out) / name)
    return written
