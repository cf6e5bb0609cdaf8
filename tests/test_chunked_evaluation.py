"""The evaluator in bounded memory (issue 26): queries searched and scored in chunks give the
very values of one search of every query, and ask for no more than they need; queries of large
classes ranked by ExactRanking give the values of one search and of a full sort. Query-versus-
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
from bench.util.knn import (
    GPU_MAX_K,
    QUERY_BLOCK,
    ExactRanking,
    FlatSearch,
    knn,
    query_chunks,
    search,
)

KEYS = [f"recall@{k}" for k in RECALL_KS] + ["r_precision", "map@r"]
LARGE = 20  # the tests' threshold: classes of more than 21 items are ranked by ExactRanking


@pytest.fixture
def large_classes(monkeypatch):
    """Queries of more than LARGE matches get their AP@R from ExactRanking; the rows it ranks
    are counted."""
    monkeypatch.setattr(retrieval, "LARGE_R", LARGE)
    return count_ranked(monkeypatch)


def count_ranked(monkeypatch) -> list[int]:
    """The number of queries of each call of ExactRanking, as it is called."""
    ranked = []
    real = ExactRanking.__call__

    def counted(self, queries, ks, exclude=None):
        ranked.append(len(queries))
        return real(self, queries, ks, exclude)

    monkeypatch.setattr(ExactRanking, "__call__", counted)
    return ranked


def unchunked_scores(x: np.ndarray, labels: np.ndarray) -> dict[str, np.ndarray]:
    """The evaluator before issue 26: one search of every query for the largest class's R."""
    _, counts = np.unique(labels, return_counts=True)
    _, idx = knn(x, max(max(RECALL_KS), int(counts.max()) - 1))
    scores = {f"recall@{k}": hits for k, hits in query_hits(labels[idx], labels).items()}
    r = counts[np.searchsorted(np.unique(labels), labels)] - 1
    same = labels[idx] == labels[:, None]
    within = [row[:n].sum() / n if n else np.nan for row, n in zip(same, r, strict=True)]
    scores["r_precision"] = np.array(within)
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


def float64_distances(queries: np.ndarray, base: np.ndarray) -> np.ndarray:
    """Squared distances in float64, as (q - y)^2 summed: the plain reference."""
    q, b = queries.astype(np.float64), base.astype(np.float64)
    return ((q[:, None, :] - b[None, :, :]) ** 2).sum(-1)


def full_sort_scores(
    queries: np.ndarray,
    query_labels: np.ndarray,
    base: np.ndarray,
    base_labels: np.ndarray,
    exclude_self: bool,
) -> dict[str, np.ndarray]:
    """The plain reference: float64 distances to every base item, fully sorted by (distance,
    index), the query itself (base row i) left out; R@K and AP@R by their definitions."""
    dist = float64_distances(queries, base)
    if exclude_self:
        np.fill_diagonal(dist, np.inf)
    order = np.lexsort((np.broadcast_to(np.arange(len(base)), dist.shape), dist), axis=1)
    same = base_labels[order[:, : len(base) - exclude_self]] == query_labels[:, None]
    scores = {f"recall@{k}": same[:, :k].any(axis=1).astype(float) for k in RECALL_KS}
    ap, within = [], []
    for row, r in zip(same, same.sum(axis=1), strict=True):
        found = np.flatnonzero(row[:r]) + 1  # ranks of the matches within the top R
        ap.append(sum((m + 1) / rank for m, rank in enumerate(found)) / r if r else np.nan)
        within.append(len(found) / r if r else np.nan)  # R-Precision: matches among the top R
    scores["r_precision"] = np.array(within)
    scores["map@r"] = np.array(ap)
    return scores


def integer_points(n: int, dims: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """`skewed`'s classes on points of small integer coordinates: every squared distance is an
    integer below 2**24, so faiss, numpy and float64 all compute it exactly, and many tie
    (duplicates included)."""
    _, labels = skewed(n, dims, seed)
    rng = np.random.default_rng(seed)
    centres = rng.integers(-2, 3, size=(labels.max() + 1, dims))
    return (centres[labels] + rng.integers(-2, 3, size=(n, dims))).astype(np.float32), labels


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
    metrics = evaluate(x, labels, clustering=False, chunk=chunk).metrics
    assert metrics == {
        **{key: float(expected[key].mean()) for key in KEYS[:-2]},
        **{key: float(np.nanmean(expected[key])) for key in KEYS[-2:]},
    }


@pytest.mark.parametrize("ranked", [False, True])
@pytest.mark.parametrize("chunk", [1, 7, None])
def test_ties_between_duplicates_are_broken_as_one_search_breaks_them(chunk, ranked, request):
    """Exact duplicates of other labels tie with the query itself (all 400 points, in the
    second set): faiss orders equal distances by index and the query drops out by index, so a
    chunk's neighbours, however many it asks for, start as one search's do; so does
    ExactRanking, which ranks the class of 130 where `ranked`."""
    if ranked:
        request.getfixturevalue("large_classes")
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
    include = ("precision_at_1", "r_precision", "mean_average_precision_at_r")
    scores, theirs = query_scores(x, labels, chunk), AccuracyCalculator(include=include)
    theirs = theirs.get_accuracy(x, labels)
    others = np.unique(labels, return_counts=True)[1][np.unique(labels, return_inverse=True)[1]]
    assert scores["recall@1"][others > 1].mean() == pytest.approx(theirs["precision_at_1"])
    assert np.nanmean(scores["r_precision"]) == pytest.approx(theirs["r_precision"])
    assert np.nanmean(scores["map@r"]) == pytest.approx(theirs["mean_average_precision_at_r"])


@pytest.mark.parametrize("chunk", [1, 7, None])
def test_large_classes_are_ranked_as_one_search_ranks_them(large_classes, chunk):
    """Exact distances with many ties: ExactRanking orders equal distances by index and
    leaves the query out by index, as faiss's one search does, so the large classes' AP@R is
    its own to the bit; the other queries' AP@R is summed over their classes' largest R, not
    the set's (numpy's pairwise sum: the last bit may move). All equal the full sort."""
    x, labels = integer_points(600, 8)
    one, full = unchunked_scores(x, labels), full_sort_scores(x, labels, x, labels, True)
    scores = query_scores(x, labels, chunk)
    big = np.bincount(labels)[labels] - 1 > LARGE
    assert big.sum() == sum(large_classes) == 180  # ranked once each, no other query
    for key in KEYS[:-1]:  # R@K and R-Precision: counts, exact
        assert np.array_equal(scores[key], one[key], equal_nan=True)
        assert np.array_equal(scores[key], full[key], equal_nan=True)
    assert np.array_equal(scores["map@r"][big], one["map@r"][big])
    np.testing.assert_allclose(scores["map@r"], one["map@r"], rtol=1e-14, atol=0)
    np.testing.assert_allclose(scores["map@r"], full["map@r"], rtol=1e-14, atol=0)


def near_ties(x: np.ndarray, labels: np.ndarray, eps: float) -> np.ndarray:
    """Queries (a mask) whose float64 ranking float32's rounding could change where their
    scores read it: a match and a non-match within `eps` of each other, next to each other
    among its nearest max(R, largest K) + 1 (the query itself left out)."""
    dist = float64_distances(x, x)
    np.fill_diagonal(dist, np.inf)
    order = np.argsort(dist, axis=1, kind="stable")[:, :-1]  # the query itself last: out
    same = labels[order] == labels[:, None]
    mixed = same[:, :-1] != same[:, 1:]
    close = np.diff(np.take_along_axis(dist, order, 1), axis=1) < eps
    read = np.arange(len(x) - 2)[None, :] < np.maximum(same.sum(axis=1), max(RECALL_KS))[:, None]
    return (mixed & close & read).any(axis=1)


def float32_error(x: np.ndarray) -> float:
    """The largest gap between float32's |x|^2 + |y|^2 - 2 x.y and float64's distances."""
    norms = np.einsum("ij,ij->i", x, x)
    found = (norms[:, None] + norms[None, :]) - 2 * (x @ x.T)
    return float(np.abs(found - float64_distances(x, x)).max())


@pytest.mark.parametrize("chunk", [1, 7, None])
def test_large_classes_match_a_full_sort_and_pml(large_classes, chunk):
    """Random points: float32 rounds each distance (here by up to 1.6e-5), so a match and a
    non-match nearer than that can come in either order, by CPU and chunk (an AMD EPYC swapped
    two 3.4e-7 apart). Every query with no such pair within 1e-4 where its scores read its
    ranking gets the full sort's R@K, R-Precision and AP@R; MAP@R is PML's
    AccuracyCalculator's."""
    x, labels = skewed(600, 16, seed=3)
    assert float32_error(x) < 2.5e-5  # well inside the 1e-4 the comparison leaves out
    clear = ~near_ties(x, labels, 1e-4)
    assert 0.95 < clear.mean() < 1  # 21 of 600 left out
    scores = query_scores(x, labels, chunk)
    full = full_sort_scores(x, labels, x, labels, True)
    assert sum(large_classes) == 180
    for key in KEYS:
        np.testing.assert_allclose(scores[key][clear], full[key][clear], rtol=1e-14, atol=0)
    calc = AccuracyCalculator(include=("r_precision", "mean_average_precision_at_r"))
    theirs = calc.get_accuracy(x, labels)
    assert np.nanmean(scores["map@r"]) == pytest.approx(theirs["mean_average_precision_at_r"])
    assert np.nanmean(scores["r_precision"]) == pytest.approx(theirs["r_precision"], rel=1e-12)


def test_large_gallery_classes_match_a_full_sort(large_classes):
    """Queries searched in a gallery whose classes hold up to 75 of its 400 items."""
    x, labels = integer_points(700, 8, seed=4)
    q, g = slice(0, 300), slice(300, 700)
    scores = retrieval.gallery_scores(x[q], labels[q], x[g], labels[g], chunk=64)
    full = full_sort_scores(x[q], labels[q], x[g], labels[g], False)
    matches = np.array([(labels[g] == c).sum() for c in labels[q]])
    assert sum(large_classes) == (matches > LARGE).sum() > 50
    found = matches > 0
    for key in KEYS:
        assert np.isnan(scores[key][~found]).all()
        np.testing.assert_allclose(scores[key][found], full[key][found], rtol=1e-14, atol=0)


def test_classes_up_to_2048_items_stay_on_faiss(monkeypatch):
    """A class of 2,048 items (R = 2,047, what faiss-gpu can select) is searched as before, to
    the bit; one of 2,049 is ranked, all of its items and no other."""
    ranked = count_ranked(monkeypatch)
    rng = np.random.default_rng(7)
    x = rng.normal(size=(4200, 4)).astype(np.float32)
    for big in (GPU_MAX_K, GPU_MAX_K + 1):
        labels = rng.permutation(
            np.concatenate([np.zeros(big, int), 1 + np.arange(4200 - big) // 4])
        )
        scores = query_scores(x, labels)
        if big == GPU_MAX_K:
            assert ranked == []
            assert_same_scores(scores, unchunked_scores(x, labels))
    assert sum(ranked) == GPU_MAX_K + 1


def test_chunks_search_no_more_queries_or_neighbours_than_they_need(monkeypatch):
    """20,000 x 16 with one class of 6,000 spread through the set, in chunks of 512: each faiss
    search is asked for at most 512 queries and for its own chunk's largest R (+1, the query
    itself) among the classes below the large ones; the class of 6,000 is ranked by
    ExactRanking, 512 queries at a time; numpy's allocations peak far below one N x 6,000
    array of neighbour indices. The faiss search is a stand-in that returns arrays of faiss's
    shapes and types (the ranking is real)."""
    monkeypatch.setenv(knn_module.THREADS_ENV, "2")
    monkeypatch.setenv(knn_module.GPU_ENV, "0")
    rng = np.random.default_rng(5)
    labels = rng.permutation(np.concatenate([np.zeros(6000, int), 1 + np.arange(14000) // 10]))
    x = rng.normal(size=(20000, 16)).astype(np.float32)
    calls, ranked = [], []

    def recorded(self, queries, k):
        calls.append((len(queries), k))
        first = rng.integers(0, len(self.base), (len(queries), 1))  # k distinct rows each
        return np.zeros((len(queries), k), np.float32), (first + np.arange(k)) % len(self.base)

    real = ExactRanking.__call__

    def ranked_rows(self, queries, ks, exclude=None):
        ranked.append((len(queries), set(ks.tolist())))
        return real(self, queries, ks, exclude)

    monkeypatch.setattr(FlatSearch, "__call__", recorded)
    monkeypatch.setattr(ExactRanking, "__call__", ranked_rows)
    tracemalloc.start()
    try:
        scores = retrieval.query_scores(x, labels, chunk=512)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    bounds = query_chunks(20000, 512)
    assert calls == [(b - a, 10) for a, b in bounds]  # R = 9 of the classes of 10, + itself
    assert [rows for rows, _ in ranked] == [512] * 11 + [368]
    assert all(ks == {5999} for _, ks in ranked)
    assert peak < 150e6 < 20000 * 6000 * 8
    assert len(scores["map@r"]) == 20000 and np.isfinite(scores["map@r"]).all()


def test_a_large_search_shows_its_progress_and_the_same_scores(monkeypatch, capsys):
    rng = np.random.default_rng(0)
    emb, labels = rng.normal(size=(300, 8)).astype(np.float32), rng.integers(0, 30, 300)
    quiet = retrieval.query_scores(emb, labels, chunk=64)
    assert "searching:" not in capsys.readouterr().err  # 300 queries: too few for a bar
    monkeypatch.setattr(retrieval, "PROGRESS_FROM", 100)
    shown = retrieval.query_scores(emb, labels, chunk=64)
    assert "searching:   0%|          | 0/300" in capsys.readouterr().err  # from the start
    for key, values in quiet.items():
        np.testing.assert_array_equal(shown[key], values)
