"""The common evaluator: Recall@K, NMI and MAP@R from one faiss kNN search."""

from __future__ import annotations

import numpy as np

from bench.util.knn import knn

RECALL_KS = (1, 2, 4, 8)
MPREC_MAX_K = 50  # Sharma et al. 2015 reports mprec@K for K = 1..50
MPREC_KS = (1, 10, 50)  # the ones a run's metrics.json keeps


def recall_at_k(neighbour_labels: np.ndarray, labels: np.ndarray, ks=RECALL_KS) -> dict:
    """Fraction of queries with at least one same-label item among their K nearest neighbours."""
    return {
        f"recall@{k}": float(hits.mean())
        for k, hits in query_hits(neighbour_labels, labels, ks).items()
    }


def query_hits(neighbour_labels: np.ndarray, labels: np.ndarray, ks=RECALL_KS) -> dict:
    """recall@K of each query (1.0 or 0.0): whether a same-label item is among its K nearest."""
    hits = neighbour_labels == labels[:, None]
    return {k: hits[:, :k].any(axis=1).astype(np.float64) for k in ks}


def map_at_r(neighbour_labels: np.ndarray, labels: np.ndarray) -> float:
    """MAP@R (Musgrave et al. 2020): R = the number of other items of the query's class."""
    return float(np.nanmean(average_precision_at_r(neighbour_labels, labels)))


def average_precision_at_r(neighbour_labels: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """AP@R of each query; NaN for a query whose class has no other item (R = 0)."""
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
    ap = np.full(len(labels), np.nan)
    valid = r > 0
    ap[valid] = (precision * hits).sum(axis=1)[valid] / r[valid]
    return ap


def query_scores(embeddings: np.ndarray, labels: np.ndarray) -> dict[str, np.ndarray]:
    """Each query's R@K and AP@R, in query order: what the report's bootstrap resamples. Their
    means are the evaluator's recall@K and map@r."""
    labels = np.asarray(labels)
    _, counts = np.unique(labels, return_counts=True)
    _, idx = knn(embeddings, max(max(RECALL_KS), int(counts.max()) - 1))
    scores = {f"recall@{k}": hits for k, hits in query_hits(labels[idx], labels).items()}
    scores["map@r"] = average_precision_at_r(labels[idx], labels)
    return scores


def mprec_from_neighbours(neighbour_labels: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """mprec@K for K = 1..neighbours: precision@K of every query, averaged over the queries of
    each class, then over the classes (Sharma et al. 2015 §4)."""
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
