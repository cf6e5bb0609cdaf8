import numpy as np
import pytest
from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator
from sklearn.datasets import load_digits
from sklearn.metrics import normalized_mutual_info_score

from bench.evaluation.clustering import nmi, nmi_best_of
from bench.evaluation.metrics import evaluate, evaluate_gallery
from bench.evaluation.retrieval import (
    average_precision_at_r,
    distance_fault,
    gallery_scores,
    recall_at_k,
)
from bench.util.knn import knn, search


def mean_ap_at_r(neighbour_labels: np.ndarray, labels: np.ndarray) -> float:
    """MAP@R: the mean of the queries' AP@R."""
    return float(np.nanmean(average_precision_at_r(neighbour_labels, labels)))


# Five points on a line: labels a a b b a.
LINE = np.array([[0.0], [1.0], [3.0], [3.5], [10.0]], dtype=np.float32)
LINE_LABELS = np.array([0, 0, 1, 1, 0])


def test_knn_excludes_the_query_itself():
    dist, idx = knn(LINE, 2)
    assert idx.tolist() == [[1, 2], [0, 2], [3, 1], [2, 1], [3, 2]]
    assert dist[0].tolist() == [1.0, 9.0]


def test_knn_keeps_exact_duplicates_of_the_query():
    x = np.array([[0.0], [0.0], [5.0]], dtype=np.float32)
    _, idx = knn(x, 1)
    assert idx[0, 0] == 1 and idx[1, 0] == 0
    assert idx[2, 0] in (0, 1)


def test_search_finds_nearest_rows_of_the_base():
    _, idx = search(LINE, np.array([[2.9]], dtype=np.float32), 2)
    assert idx.tolist() == [[2, 3]]


def test_recall_at_k_by_hand():
    _, idx = knn(LINE, 4)
    r = recall_at_k(LINE_LABELS[idx], LINE_LABELS, ks=(1, 2, 4))
    # nearest: 0->1 hit, 1->0 hit, 2->3 hit, 3->2 hit, 4->3 miss; 2nd: 4->2 miss; 4th: 4->0 hit
    assert r == {"recall@1": 0.8, "recall@2": 0.8, "recall@4": 1.0}


def test_map_at_r_by_hand():
    _, idx = knn(LINE, 4)
    # R=2 for label 0 points, R=1 for label 1 points.
    # 0: [1 a, 2 b] -> (1/1)/2 = 0.5   1: [0 a, 2 b] -> 0.5   2: [3 b] -> 1   3: [2 b] -> 1
    # 4: [3 b, 2 b] -> 0
    assert mean_ap_at_r(LINE_LABELS[idx], LINE_LABELS) == pytest.approx((0.5 + 0.5 + 1 + 1 + 0) / 5)


def test_map_at_r_counts_precision_at_each_correct_rank():
    labels = np.array([0, 0, 0, 1, 1, 1])
    # query 0 (R=2) retrieves [1 wrong... ] constructed directly on neighbour labels
    neighbour_labels = np.array(
        [
            [1, 0, 0, 1, 1],
            [0, 1, 0, 1, 1],
            [0, 0, 1, 1, 1],
            [1, 1, 0, 0, 0],
            [0, 1, 1, 0, 0],
            [0, 0, 1, 1, 0],
        ]
    )
    expected = [
        (1 / 2) / 2,  # hit at rank 2 only (within R=2)
        (1 / 1) / 2,  # hit at rank 1 only
        (1 + 1) / 2,  # hits at ranks 1, 2
        (1 + 1) / 2,
        (1 / 2) / 2,
        0.0,
    ]
    assert mean_ap_at_r(neighbour_labels, labels) == pytest.approx(np.mean(expected))


def test_map_at_r_needs_enough_neighbours():
    with pytest.raises(ValueError, match="MAP@R needs"):
        mean_ap_at_r(np.zeros((4, 1), dtype=int), np.array([0, 0, 0, 1]))


def test_nmi_of_separated_clusters_is_one_and_matches_sklearn():
    rng = np.random.default_rng(0)
    centres = np.array([[0, 0], [10, 0], [0, 10]], dtype=np.float32)
    labels = np.repeat([0, 1, 2], 30)
    x = centres[labels] + rng.normal(scale=0.3, size=(90, 2)).astype(np.float32)
    # One k-means run (PML's) can settle with two centres in one cluster; the best of 5 finds
    # the clusters.
    assert nmi_best_of(x, labels) == pytest.approx(1.0)
    assert nmi(x, labels) <= nmi_best_of(x, labels)
    shuffled = rng.permutation(labels)
    assert nmi(x, shuffled) < 0.2 and nmi_best_of(x, shuffled) < 0.2
    assert normalized_mutual_info_score(shuffled, labels) == pytest.approx(nmi_best_of(x, shuffled))


def test_nmi_is_deterministic_for_a_seed():
    d = load_digits()
    x, y = d.data[d.target >= 5], d.target[d.target >= 5]
    assert nmi_best_of(x, y, seed=3) == nmi_best_of(x, y, seed=3)
    assert nmi(x, y) == nmi(x, y)
    assert 0.7 < nmi_best_of(x, y) < 0.85


@pytest.mark.parametrize("seed", [0, 1])
def test_evaluate_matches_pml_accuracy_calculator(seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 6, size=300)
    x = (rng.normal(size=(300, 16)) + labels[:, None] * 0.4).astype(np.float32)
    ours = evaluate(x, labels).metrics
    include = ("precision_at_1", "r_precision", "mean_average_precision_at_r")
    calc = AccuracyCalculator(include=include)
    theirs = calc.get_accuracy(x, labels)
    assert ours["recall@1"] == pytest.approx(theirs["precision_at_1"])
    assert ours["r_precision"] == pytest.approx(theirs["r_precision"])
    assert ours["map@r"] == pytest.approx(theirs["mean_average_precision_at_r"])
    keys = {"recall@1", "recall@2", "recall@4", "recall@8", "nmi", "nmi_best_of_5"}
    keys |= {"r_precision", "map@r"}
    assert set(ours) == keys
    assert ours["recall@1"] <= ours["recall@2"] <= ours["recall@4"] <= ours["recall@8"]


def test_raw_digits_5_to_9_reference_values():
    d = load_digits()
    m = d.target >= 5
    metrics = evaluate(d.data[m], d.target[m]).metrics
    assert metrics["map@r"] == pytest.approx(0.611, abs=1e-3)
    assert metrics["recall@1"] == pytest.approx(0.9888, abs=1e-3)


def test_nmi_is_pmls_single_kmeans_run_and_best_of_5_is_kept_beside_it():
    import torch

    rng = np.random.default_rng(5)
    labels = np.repeat(np.arange(12), 40)
    emb = (rng.normal(size=(12, 16))[labels] + rng.normal(0, 1.2, (480, 16))).astype(np.float32)
    pml = AccuracyCalculator(include=("NMI",)).get_accuracy(
        torch.from_numpy(emb), torch.from_numpy(labels)
    )
    metrics = evaluate(emb, labels).metrics
    assert metrics["nmi"] == pytest.approx(pml["NMI"], abs=1e-12)
    assert metrics["nmi_best_of_5"] == pytest.approx(nmi_best_of(emb, labels, 0, 5))
    assert {"nmi", "nmi_best_of_5"}.isdisjoint(evaluate(emb, labels, clustering=False).metrics)


# Queries and a gallery on a line; gallery labels: 0 0 1 1 1 2.
GALLERY = np.array([[0.0], [1.0], [2.0], [5.0], [6.0], [9.0]], dtype=np.float32)
GALLERY_LABELS = np.array([0, 0, 1, 1, 1, 2])
QUERIES = np.array([[0.4], [5.4], [1.4], [20.0]], dtype=np.float32)
QUERY_LABELS = np.array([0, 1, 1, 3])


@pytest.mark.parametrize("chunk", [1, 3, None])
def test_gallery_scores_by_hand(chunk):
    scores = gallery_scores(QUERIES, QUERY_LABELS, GALLERY, GALLERY_LABELS, chunk)
    # q0 (R=2): 0.0 a, 1.0 a -> AP 1; q1 (R=3): 5 b, 6 b, 2 b -> 1; q2 (R=3): 1.0 a, 2.0 b,
    # 0.0 a -> (1/2) / 3; q3: class 3 has no gallery item -> no score
    assert scores["map@r"][:3].tolist() == [1.0, 1.0, pytest.approx(1 / 6)]
    assert scores["recall@1"][:3].tolist() == [1.0, 1.0, 0.0]
    assert scores["recall@2"][:3].tolist() == [1.0, 1.0, 1.0]
    assert all(np.isnan(scores[key][3]) for key in ("recall@1", "recall@8", "map@r"))
    metrics = evaluate_gallery(QUERIES, QUERY_LABELS, GALLERY, GALLERY_LABELS, chunk).metrics
    assert metrics["recall@1"] == pytest.approx(2 / 3)
    assert metrics["map@r"] == pytest.approx((1 + 1 + 1 / 6) / 3)


@pytest.mark.parametrize("chunk", [1, 7, None])
def test_gallery_evaluation_matches_pml_with_a_reference_set(chunk):
    """In-Shop's protocol: queries searched in the gallery only. PML leaves out queries whose
    class has no gallery item, and so do we (their scores are NaN)."""
    rng = np.random.default_rng(4)
    labels = rng.integers(0, 40, 400) ** 2 // 40  # classes of 1 to 50 items
    x = (rng.normal(size=(400, 16)) + 0.4 * rng.normal(size=(40, 16))[labels]).astype(np.float32)
    in_gallery = rng.random(400) < 0.5
    query, gallery = x[~in_gallery], x[in_gallery]
    ours = evaluate_gallery(query, labels[~in_gallery], gallery, labels[in_gallery], chunk).metrics
    calc = AccuracyCalculator(include=("precision_at_1", "mean_average_precision_at_r"))
    theirs = calc.get_accuracy(query, labels[~in_gallery], gallery, labels[in_gallery], False)
    assert not np.isin(labels[~in_gallery], labels[in_gallery]).all()  # some queries left out
    assert ours["recall@1"] == pytest.approx(theirs["precision_at_1"])
    assert ours["map@r"] == pytest.approx(theirs["mean_average_precision_at_r"])


def test_evaluate_hands_back_the_per_query_scores_of_its_own_search(monkeypatch):
    """The scores by hand on the line (as test_recall_at_k_by_hand and test_map_at_r_by_hand
    count them), from the one search that gave the metrics."""
    import bench.evaluation.retrieval as retrieval

    searches = []
    real = retrieval.FlatSearch.__call__
    monkeypatch.setattr(
        retrieval.FlatSearch, "__call__", lambda s, q, k: searches.append(k) or real(s, q, k)
    )
    metrics, scores = evaluate(LINE, LINE_LABELS, clustering=False)
    assert len(searches) == 1
    assert scores["recall@1"].tolist() == [1, 1, 1, 1, 0]
    assert scores["recall@4"].tolist() == [1, 1, 1, 1, 1]
    assert scores["map@r"].tolist() == [0.5, 0.5, 1, 1, 0]
    assert metrics["map@r"] == scores["map@r"].mean() == pytest.approx(0.6)


def test_evaluate_gallery_hands_back_its_per_query_scores():
    metrics, scores = evaluate_gallery(QUERIES, QUERY_LABELS, GALLERY, GALLERY_LABELS)
    assert metrics == {key: np.nanmean(values) for key, values in scores.items()}
    plain = gallery_scores(QUERIES, QUERY_LABELS, GALLERY, GALLERY_LABELS)
    assert scores.keys() == plain.keys()
    for key, values in scores.items():
        np.testing.assert_array_equal(values, plain[key])  # NaN for the query without a class


def test_a_long_k_means_is_said_before_it_starts_with_how_to_skip_it(monkeypatch, caplog):
    # Issue 43: 20,000 test classes spent minutes in k-means without a word.
    from bench.evaluation import clustering

    rng = np.random.default_rng(0)
    x, labels = rng.normal(size=(60, 4)).astype(np.float32), np.repeat(np.arange(20), 3)
    caplog.set_level("INFO", logger="nngk-bench")
    evaluate(x, labels)
    assert not caplog.messages  # 60 points: nothing to say
    # 60 x 20 x 4 x (20 + 5 x 50) multiply-adds: past the threshold of the test.
    monkeypatch.setattr(clustering, "SAID_FROM", 60 * 20 * 4 * 270)
    evaluate(x, labels)
    first, second = caplog.messages
    assert first == (
        "NMI: k-means of 60 embeddings into 20 clusters, 20 iterations (PML's), then the best "
        "of 5 restarts of 50; --clustering pml keeps PML's alone, none skips k-means"
    )
    assert second.startswith("NMI: PML's k-means took 0 s; the 5 restarts take about 12.5x")
    caplog.clear()
    evaluate(x, labels, best_of=False)  # PML's alone: 20 iterations, below the threshold
    assert not caplog.messages


def test_durations_read_in_their_unit():
    from bench.util.progress import duration

    assert [duration(s) for s in (37.4, 600, 12_600)] == ["37 s", "10 min", "3.5 h"]


def test_embeddings_whose_squared_distances_overflow_float32_are_refused_in_one_line():
    # A network that diverged without a NaN: faiss's k-means aborted the process on these, and
    # every distance was infinite, so every neighbour tied.
    x = np.array([[0.0, 1.0], [1.0, 0.0], [2e19, 0.0], [0.0, 3.0]], dtype=np.float32)
    labels = np.array([0, 0, 1, 1])
    assert "2e+19 overflows float32" in distance_fault(x)
    with pytest.raises(ValueError, match="cannot search these embeddings: a value of 2e"):
        evaluate(x, labels)
    with pytest.raises(ValueError, match="NaN or infinite"):
        evaluate_gallery(x[:2], labels[:2], np.array([[np.nan, 0.0]]), labels[2:3])
    # The bound: dims * (2 * largest)^2 just below float32's largest value passes.
    dims = 2
    bound = np.sqrt(float(np.finfo(np.float32).max) / (4 * dims))
    assert distance_fault(np.full((2, dims), bound * 0.999, dtype=np.float32)) == ""
    assert distance_fault(np.full((2, dims), bound * 1.001, dtype=np.float32)) != ""
    assert distance_fault(np.zeros((0, 4), dtype=np.float32)) == ""
