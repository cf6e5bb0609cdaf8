"""Clustering quality: NMI of k-means clusters (faiss) with the labels."""

from __future__ import annotations

import faiss
import numpy as np
from sklearn.metrics import normalized_mutual_info_score

from bench.util.knn import _as_float32


def nmi(embeddings: np.ndarray, labels: np.ndarray, seed: int = 0, nredo: int = 5) -> float:
    """NMI of k-means clusters (as many as classes; best of `nredo` faiss restarts) with labels."""
    x = _as_float32(embeddings)
    n_classes = len(np.unique(labels))
    kmeans = faiss.Kmeans(
        x.shape[1],
        n_classes,
        niter=50,
        nredo=nredo,
        seed=seed,
        verbose=False,
        min_points_per_centroid=1,
        max_points_per_centroid=1_000_000,  # no warning, no sampling
    )
    kmeans.train(x)
    _, assignment = kmeans.index.search(x, 1)
    return float(normalized_mutual_info_score(labels, assignment[:, 0]))
