"""`nngk-bench visualize RUN_DIR`: one run's generalization views, from its saved embeddings."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd

from bench.report import figures, similarity, tsne
from bench.report.run_files import saved_embeddings
from bench.runs import store
from bench.util.atomic import atomic_write_bytes
from bench.util.progress import log

HEARTBEAT_S = 15.0  # a line this often while one figure is drawn (t-SNE: a minute or more)


def load_embeddings(run_dir: Path, name: str) -> tuple[np.ndarray, np.ndarray]:
    """A run's saved embeddings and labels; a one-line error where the file is missing or
    damaged (DamagedRun)."""
    saved = saved_embeddings(run_dir, name)
    if saved is None:
        raise FileNotFoundError(
            f"{Path(run_dir) / name} not found; visualize needs a finished run of this "
            f"version (with {store.EMBEDDINGS} and {store.TRAIN_EMBEDDINGS})"
        )
    return saved


def subsample(x: np.ndarray, labels: np.ndarray, n: int, seed: int = 0):
    """At most n points, drawn with a fixed seed (t-SNE here is O(n^2))."""
    if len(x) <= n:
        return x, labels
    keep = np.sort(np.random.default_rng(seed).choice(len(x), n, replace=False))
    return x[keep], labels[keep]


@contextmanager
def drawing(name: str, what: str) -> Iterator[None]:
    """A line saying what is drawn now, then one every HEARTBEAT_S until it is done."""
    log.info(f"drawing {name}: {what}")
    start, done = time.monotonic(), threading.Event()

    def still() -> None:
        while not done.wait(HEARTBEAT_S):
            log.info(f"still drawing {name} ({time.monotonic() - start:.0f} s)")

    beat = threading.Thread(target=still, daemon=True)
    beat.start()
    try:
        yield
    finally:
        done.set()
        beat.join()


def visualize_run(run_dir: Path, out: Path, max_points: int = 2000) -> list[Path]:
    """tsne.png (joint t-SNE, three panels), similarity.png (scatter), and, for NNGK runs,
    centres.png (Fig. 4b, 4c from the history); each written as soon as it is drawn."""
    train, train_labels = subsample(*load_embeddings(run_dir, store.TRAIN_EMBEDDINGS), max_points)
    test, test_labels = subsample(*load_embeddings(run_dir, store.EMBEDDINGS), max_points)
    plan: dict[str, tuple[str, Callable[[], bytes]]] = {
        "tsne.png": (
            f"one t-SNE of {len(train)} training and {len(test)} test embeddings (the slowest)",
            lambda: tsne.joint_tsne(train, train_labels, test, test_labels),
        ),
        "similarity.png": (
            "same- against different-class similarities, training and test",
            lambda: similarity.similarity_scatter_figure(
                similarity.similarity_scatter(train, train_labels),
                similarity.similarity_scatter(test, test_labels),
            ),
        ),
    }
    history = Path(run_dir) / store.HISTORY
    if history.is_file():
        table = pd.read_csv(history)
        if "mean_centre_distance" in table:
            what = "the class centres' statistics by epoch"
            plan["centres.png"] = (what, lambda: figures.centre_statistics(table))
    written = []
    for name, (what, draw) in plan.items():
        with drawing(name, what):
            data = draw()
        atomic_write_bytes(Path(out) / name, data)
        written.append(Path(out) / name)
    return written
