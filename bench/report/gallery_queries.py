"""Which queries a gallery shows and what they retrieve: the data set's fixed queries, the
worst ones by AP@R, two runs' top-1 disagreements, a pairs run's errors; searched as the run's
protocol searches (with a gallery, In-Shop's queries among its gallery items only)."""

from __future__ import annotations

import zlib

import numpy as np

from bench.data.datasets import query_flags
from bench.evaluation.pair_scoring import pairs_of
from bench.evaluation.retrieval import gallery_scores, query_scores
from bench.util.knn import search
from bench.util.torch_knn import nearest_others


def fixed_order(labels: np.ndarray, dataset: str) -> np.ndarray:
    """Every test item in an order that depends only on the labels and the data set's name:
    one item of each class first (classes in a shuffled order), then the rest shuffled."""
    labels = np.asarray(labels)
    rng = np.random.default_rng(zlib.crc32(dataset.encode()))  # hash() differs per process
    items = rng.permutation(len(labels))
    _, first = np.unique(labels[items], return_index=True)  # each class's first in that order
    first = items[first[rng.permutation(len(first))]]
    return np.concatenate([first, items[~np.isin(items, first)]]).astype(np.int64)


def fixed_queries(
    labels: np.ndarray, n: int, dataset_name: str, gallery: np.ndarray | None = None
) -> np.ndarray:
    """n test queries, the same for every run of the data set: one per class where n allows;
    with a `gallery` (a protocol's: True for its gallery items), of the query items only."""
    return query_order(labels, dataset_name, gallery)[:n]


def query_order(labels: np.ndarray, dataset: str, gallery: np.ndarray | None) -> np.ndarray:
    """`fixed_order`, of the items that are queries (all but a `gallery`'s items)."""
    order = fixed_order(labels, dataset)
    return order if gallery is None else order[~np.asarray(gallery, bool)[order]]


def lowest(ap: np.ndarray, n: int) -> np.ndarray:
    """The n queries of lowest AP (NaN: none), lowest first, ties in query order."""
    order = np.argsort(np.where(np.isnan(ap), np.inf, ap), kind="stable")
    return order[: min(n, int((~np.isnan(ap)).sum()))]


def retrieved(
    embeddings: np.ndarray, queries: np.ndarray, k: int, gallery: np.ndarray | None = None
) -> np.ndarray:
    """(queries, k): each query's k nearest test items (squared L2), the query itself left out
    by index, as the evaluator's kNN leaves it out; with a `gallery`, among its items only,
    as the query-gallery protocol searches."""
    embeddings = np.asarray(embeddings)
    pool = np.arange(len(embeddings)) if gallery is None else np.flatnonzero(gallery)
    own = int(gallery is None)  # a query among the items searched: one more, left out
    k = min(k, len(pool) - own)
    queries = np.asarray(queries, dtype=np.int64)
    _, idx = search(embeddings[pool], embeddings[queries], k + own)
    rows = [found[found != q][:k] for q, found in zip(queries, pool[idx], strict=True)]
    return np.stack(rows).astype(np.int64) if rows else np.zeros((0, k), np.int64)


def frame_decisions(labels: np.ndarray, queries: np.ndarray, found: np.ndarray) -> np.ndarray:
    """Green (True) where a retrieved item has its query's label, red (False) where not."""
    labels = np.asarray(labels)
    return labels[found] == labels[np.asarray(queries)][:, None]


def top1_correct(
    embeddings: np.ndarray, labels: np.ndarray, device=None, gallery: np.ndarray | None = None
) -> np.ndarray:
    """Whether each test item's nearest other item has its label (searched by faiss on the
    CPU, or by torch on `device`: `torch_knn.search_device`); with a `gallery`, each query's
    nearest gallery item (a gallery item's own: False, it is never a query)."""
    labels = np.asarray(labels)
    if gallery is None:
        return labels[nearest_others(embeddings, 1, device)[1][:, 0]] == labels
    queries = np.flatnonzero(~np.asarray(gallery, bool))
    right = np.zeros(len(labels), bool)
    right[queries] = labels[retrieved(embeddings, queries, 1, gallery)[:, 0]] == labels[queries]
    return right


def compare_queries(
    labels: np.ndarray,
    right_a: np.ndarray,
    right_b: np.ndarray,
    n: int,
    dataset: str,
    gallery: np.ndarray | None = None,
) -> np.ndarray:
    """n queries in the data set's fixed order (of its query items, with a `gallery`): first
    those where exactly one run's top-1 is right, then the fixed queries where the two agree."""
    order = query_order(labels, dataset, gallery)
    differ = right_a[order] != right_b[order]
    chosen = order[differ][:n]
    return np.concatenate([chosen, order[~differ][: n - len(chosen)]])


def pair_errors(
    distances: np.ndarray, same: np.ndarray, threshold: float, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """(false accepts: different-class pairs at most `threshold` apart, closest first; false
    rejects: same-class pairs farther apart, farthest first), n of each at most."""
    d = np.asarray(distances, dtype=np.float64)
    same = np.asarray(same).astype(bool)
    accepts = np.flatnonzero(~same & (d <= threshold))
    rejects = np.flatnonzero(same & (d > threshold))
    accepts = accepts[np.argsort(d[accepts], kind="stable")]
    rejects = rejects[np.argsort(-d[rejects], kind="stable")]
    return accepts[:n], rejects[:n]


def scored_pairs(labels: np.ndarray) -> np.ndarray:
    """The test pairs (i, j, same) the run was scored on, each unordered pair once."""
    pairs = pairs_of(np.asarray(labels), 4)
    ends = np.sort(pairs[:, :2], axis=1)
    _, first = np.unique(ends, axis=0, return_index=True)
    return pairs[np.sort(first)]


def query_ap(
    emb: np.ndarray, labels: np.ndarray, device=None, gallery: np.ndarray | None = None
) -> np.ndarray:
    """Each test item's AP@R as the run's protocol scored it (NaN for a gallery's items)."""
    if gallery is None:
        return query_scores(emb, labels, device=device)["map@r"]
    g, labels = np.asarray(gallery, bool), np.asarray(labels)
    ap = np.full(len(labels), np.nan)
    ap[~g] = gallery_scores(emb[~g], labels[~g], emb[g], labels[g], device=device)["map@r"]
    return ap


def gallery_items(test) -> np.ndarray | None:
    """True for the gallery items of a test split with queries (In-Shop's query-gallery
    protocol), which the queries are searched in; None where every item is searched among the
    others."""
    flags = query_flags(test)
    return None if flags is None else ~np.asarray(flags, bool)
