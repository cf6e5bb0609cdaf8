"""The evaluator in bounded memory (issue 26): queries searched and scored in chunks give the
very values of one search of every query, and ask for no more than they need. Query-versus-
gallery evaluation is tested with the evaluator's other checks, in test_evaluate.py."""

from __future__ import annotations

import tracemalloc

import faiss
import numpy as np
import pytest
from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

from bench.evaluation import retrieval
from bench.evaluation.metrics import evaluate
from bench.evaluation.retrieval import (
    CHUNK_ROWS,
    RECALL_KS,
    average_precision_at_r,
    query_hits,
    query_scores,
)
from bench.util import knn as knn_module
from bench.util.knn import QUERY_BLOCK, FlatSearch, knn, query_chunks, search

KEYS = [f"recall@{k}" for k in RECALL_KS] + ["map@r"]


def unchunked_scores(x: np.ndarray, labels: np.ndarray) -> dict[str, np.ndarray]:
    """The evaluator before issue 26: one search of every query for the largest class's R."""
    _, counts = np.unique(labels, return_counts=True)
    _, idx = knn(x, max(max(RECALL_KS), int(counts.max()) - 1))
    scores = {f"recall@{k}": hits for k, hits in query_hits(labels[idx], labels).items()}
    scores["map@r"] = average_precision_at_r(labels[idx], labels)
    return scores


def skewed(n: int, dims: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """One class of 30 % of the items, 5 % singletons, the rest in classes of 2 to 12."""
    rng = np.random.default_rng(seed)
    big, lone = int(0.3 * n), n // 20
    sizes = rng.integers(2, 13, n)
    small = np.repeat(np.arange(n), sizes)[: n - big - lone]
    labels = np.concatenate([np.zeros(big, int), 1 + small, n + 1 + np.arange(lone)])
    labels = rng.permutation(labels)
    centres = rng.normal(size=(labels.max() + 1, dims))
    return (rng.normal(size=(n, dims)) + 0.4 * centres[labels]).astype(np.float32), labels


def assert_same_scores(found: dict, expected: dict) -> None:
    assert list(found) == KEYS
    for key in KEYS:
        assert found[key].dtype == np.float64
        assert np.array_equal(found[key], expected[key], equal_nan=True), key


@pytest.mark.parametrize("chunk", [1, 7, None])
def test_chunks_give_the_scores_of_one_search(chunk):
    x, labels = skewed(500, 8)  # R up to 149: AP@R sums past numpy's 128-term pairwise block
    expected = unchunked_scores(x, labels)
    assert np.isnan(expected["map@r"]).sum() >= 25  # singletons: no AP@R, a miss at every K
    assert_same_scores(query_scores(x, labels, chunk), expected)
    metrics = evaluate(x, labels, clustering=False, chunk=chunk)
    assert metrics == {
        **{key: float(expected[key].mean()) for key in KEYS[:-1]},
        "map@r": float(np.nanmean(expected["map@r"])),
    }


@pytest.mark.parametrize("chunk", [1, 7, None])
def test_ties_between_duplicates_are_broken_as_one_search_breaks_them(chunk):
    """Exact duplicates of other labels tie with the query itself (all 400 points, in the
    second set): faiss orders equal distances by index and the query drops out by index, so a
    chunk's neighbours, however many it asks for, start as one search's do."""
    rng = np.random.default_rng(1)
    labels = rng.permutation(np.concatenate([np.zeros(130, int), 1 + np.arange(270) // 3]))
    points = rng.normal(size=(40, 8)).astype(np.float32)
    for x in (points[rng.integers(0, 40, 400)], np.zeros((400, 8), np.float32)):
        assert_same_scores(query_scores(x, labels, chunk), unchunked_scores(x, labels))


def test_whole_query_blocks_get_the_distances_of_one_search():
    """At 4,500 x 64 faiss multiplies with BLAS, in blocks of 4,096 queries: chunks of whole
    blocks (the default) get its products to the bit, duplicates' ties included."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(300, 64)).astype(np.float32)[rng.integers(0, 300, 4500)]
    threshold = faiss.cvar.distance_compute_blas_threshold
    assert 404 * 64 < threshold <= 4500 * 64  # BLAS for all queries, not for the last 404
    labels = rng.integers(0, 900, 4500)
    assert CHUNK_ROWS == QUERY_BLOCK == 4096
    assert query_chunks(4500, CHUNK_ROWS) == [(0, 4096), (4096, 4500)]
    one = search(x, x, 9)
    chunked = FlatSearch(x, len(x))
    parts = [chunked(x[a:b], 9) for a, b in query_chunks(4500, CHUNK_ROWS)]
    assert np.array_equal(np.concatenate([d for d, _ in parts]), one[0])
    assert np.array_equal(np.concatenate([i for _, i in parts]), one[1])
    assert faiss.cvar.distance_compute_blas_threshold == threshold  # restored
    assert_same_scores(query_scores(x, labels), unchunked_scores(x, labels))


def test_a_last_chunk_smaller_than_faiss_threads_joins_the_one_before(monkeypatch):
    monkeypatch.setenv(knn_module.THREADS_ENV, "2")
    assert query_chunks(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert query_chunks(9, 4) == [(0, 4), (4, 9)]
    assert query_chunks(3, 4) == [(0, 3)]
    assert query_chunks(0, 4) == []


@pytest.mark.parametrize("chunk", [1, 7, None])
def test_chunked_scores_match_pml_accuracy_calculator(chunk):
    """PML leaves out queries whose class has no other item, in precision_at_1 as in MAP@R; our
    R@1 counts them as misses (as before issue 26), so R@1 is compared on the others."""
    x, labels = skewed(300, 16, seed=3)
    calc = AccuracyCalculator(include=("precision_at_1", "mean_average_precision_at_r"))
    scores, theirs = query_scores(x, labels, chunk), calc.get_accuracy(x, labels)
    others = np.unique(labels, return_counts=True)[1][np.unique(labels, return_inverse=True)[1]]
    assert scores["recall@1"][others > 1].mean() == pytest.approx(theirs["precision_at_1"])
    assert np.nanmean(scores["map@r"]) == pytest.approx(theirs["mean_average_precision_at_r"])


def test_chunks_search_no_more_queries_or_neighbours_than_they_need(monkeypatch):
    """20,000 x 16 with one class of 6,000 (its items first), in chunks of 512: each search is
    asked for at most 512 queries and for its own chunk's largest R (+1, the query itself), and
    numpy's allocations peak far below one N x 6,000 array of neighbour indices. The search is
    a stand-in that returns arrays of faiss's shapes and types (at this size faiss's selection
    of 6,000 neighbours takes most of a minute on 2 cores)."""
    monkeypatch.setenv(knn_module.THREADS_ENV, "2")
    rng = np.random.default_rng(5)
    labels = np.concatenate([np.zeros(6000, int), 1 + np.arange(14000) // 10])
    x = rng.normal(size=(20000, 16)).astype(np.float32)
    calls = []

    def recorded(self, queries, k):
        calls.append((len(queries), k))
        first = rng.integers(0, len(self.base), (len(queries), 1))  # k distinct rows each
        return np.zeros((len(queries), k), np.float32), (first + np.arange(k)) % len(self.base)

    monkeypatch.setattr(FlatSearch, "__call__", recorded)
    tracemalloc.start()
    try:
        scores = retrieval.query_scores(x, labels, chunk=512)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    bounds = query_chunks(20000, 512)
    needs = [max(8, int(np.bincount(labels)[labels[a:b]].max()) - 1) + 1 for a, b in bounds]
    assert calls == [(b - a, k) for (a, b), k in zip(bounds, needs, strict=True)]
    assert max(rows for rows, _ in calls) == 512 and needs[:12] == [6000] * 12
    assert needs[12:] == [10] * (len(bounds) - 12)  # chunks past the big class pay nothing
    assert peak < 150e6 < 20000 * 6000 * 8
    assert len(scores["map@r"]) == 20000 and np.isfinite(scores["map@r"]).all()
