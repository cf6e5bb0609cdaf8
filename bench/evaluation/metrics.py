"""The common evaluator: Recall@K, NMI and MAP@R of one embedding, from one faiss kNN search."""

from __future__ import annotations

import numpy as np

from bench.evaluation.clustering import nmi, nmi_best_of
from bench.evaluation.retrieval import RECALL_KS, map_at_r, recall_at_k
from bench.util.knn import knn

METRIC_KEYS = tuple(f"recall@{k}" for k in RECALL_KS) + ("nmi", "map@r")


BEST_OF = 5  # k-means restarts of `nmi_best_of_5`


def evaluate(
    embeddings: np.ndarray,
    labels: np.ndarray,
    seed: int = 0,
    clustering: bool = True,
    best_of: bool = True,
) -> dict:
    """All retrieval and clustering metrics of one embedding of a labelled set: NMI of one
    k-means run as PML's, and (`best_of`) the best of 5 restarts as `nmi_best_of_5`. Without
    `clustering` (validation, which selects by MAP@R) no k-means runs: R@K and MAP@R only."""
    labels = np.asarray(labels)
    _, counts = np.unique(labels, return_counts=True)
    k = max(max(RECALL_KS), int(counts.max()) - 1)
    _, idx = knn(embeddings, k)
    neighbour_labels = labels[idx]
    metrics = recall_at_k(neighbour_labels, labels)
    if clustering:
        metrics["nmi"] = nmi(embeddings, labels)
    if clustering and best_of:
        metrics[f"nmi_best_of_{BEST_OF}"] = nmi_best_of(embeddings, labels, seed, BEST_OF)
    metrics["map@r"] = map_at_r(neighbour_labels, labels)
    return metrics
