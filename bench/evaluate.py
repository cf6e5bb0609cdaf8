"""The common evaluator: Recall@K, NMI and MAP@R from one faiss kNN search."""

from __future__ import annotations

import faiss
import numpy as np
from sklearn.metrics import normalized_mutual_info_score

RECALL_KS = (1, 2, 4, 8)
METRIC_KEYS = tuple(f"recall@{k}" for k in RECALL_KS) + ("nmi", "map@r")
MPREC_MAX_K = 50  # seed 002 reports mprec@K for K = 1..50
MPREC_KS = (1, 10, 50)  # the ones a run's metrics.json keeps


def _as_float32(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(x, dtype=np.float32))


def search(base: np.ndarray, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact (flat) squared-L2 k nearest rows of `base` for every query: (distances, indices)."""
    base = _as_float32(base)
    index = faiss.IndexFlatL2(base.shape[1])
    index.add(base)
    return index.search(_as_float32(queries), min(k, len(base)))


def knn(embeddings: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k nearest neighbours (squared L2) of every row among the other rows.

    The query itself is excluded by index, not by distance, so exact duplicates of a query
    still count as neighbours. Returns (distances, indices), each of shape (N, k).
    """
    x = _as_float32(embeddings)
    n = len(x)
    k = min(k, n - 1)
    dist, idx = search(x, x, k + 1)
    is_self = idx == np.arange(n)[:, None]
    # Rows where ties pushed the query out of its own top k+1 drop their last neighbour instead.
    missing = ~is_self.any(axis=1)
    is_self[missing, -1] = True
    keep = ~is_self
    return dist[keep].reshape(n, k), idx[keep].reshape(n, k)


def recall_at_k(neighbour_labels: np.ndarray, labels: np.ndarray, ks=RECALL_KS) -> dict:
    """Fraction of queries with at least one same-label item among their K nearest neighbours."""
    hits = neighbour_labels == labels[:, None]
    return {f"recall@{k}": float(hits[:, :k].any(axis=1).mean()) for k in ks}


def map_at_r(neighbour_labels: np.ndarray, labels: np.ndarray) -> float:
    """MAP@R (Musgrave et al. 2020): R = the number of other items of the query's class."""
    classes, counts = np.unique(labels, return_counts=True)
    r = counts[np.searchsorted(classes, labels)] - 1
    max_r = int(r.max())
    if neighbour_labels.shape[1] < max_r:
        raise ValueError(
            f"MAP@R needs {max_r} neighbours per query, got {neighbour_labels.shape[1]}"
        )
    hits = (neighbour_labels[:, :max_r] == labels[:, None]).astype(np.float64)
    ranks = np.arange(1, max_r + 1)
    within_r = ranks[None, :] <= r[:, None]
    hits *= within_r
    precision = np.cumsum(hits, axis=1) / ranks
    valid = r > 0
    ap = (precision * hits).sum(axis=1)[valid] / r[valid]
    return float(ap.mean())


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


def evaluate(embeddings: np.ndarray, labels: np.ndarray, seed: int = 0) -> dict:
    """All retrieval and clustering metrics of one embedding of a labelled set."""
    labels = np.asarray(labels)
    _, counts = np.unique(labels, return_counts=True)
    k = max(max(RECALL_KS), int(counts.max()) - 1)
    _, idx = knn(embeddings, k)
    neighbour_labels = labels[idx]
    metrics = recall_at_k(neighbour_labels, labels)
    metrics["nmi"] = nmi(embeddings, labels, seed=seed)
    metrics["map@r"] = map_at_r(neighbour_labels, labels)
    return metrics


def mprec_from_neighbours(neighbour_labels: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """mprec@K for K = 1..neighbours: precision@K of every query, averaged over the queries of
    each class, then over the classes (seed 002 §4)."""
    hits = (neighbour_labels == labels[:, None]).astype(np.float64)
    precision = np.cumsum(hits, axis=1) / np.arange(1, hits.shape[1] + 1)
    classes = np.unique(labels)
    per_class = [precision[labels == c].mean(axis=0) for c in classes]
    return np.mean(per_class, axis=0)


def mprec_at_k(embeddings: np.ndarray, labels: np.ndarray, max_k: int = MPREC_MAX_K) -> np.ndarray:
    """mprec@K for K = 1..max_k (at most N - 1): every item a query against the rest."""
    labels = np.asarray(labels)
    _, idx = knn(embeddings, max_k)
    return mprec_from_neighbours(labels[idx], labels)
