"""Exact k-nearest-neighbour search (faiss): the one search every part of the harness uses."""

from __future__ import annotations

import faiss
import numpy as np


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
