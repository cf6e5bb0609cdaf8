import time

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import average_precision_score

from bench.evaluation.pair_scoring import pairs_of
from bench.evaluation.pairs import (
    best_and_worst,
    choose_threshold,
    distance_distributions,
    pair_distances,
    per_category,
    pr_curve,
    sample_pairs,
    verification_metrics,
)

# 6 classes of 10 images plus a singleton class 99 and a class 7 with only 3 members.
LABELS = np.array([c for c in range(6) for _ in range(10)] + [99, 7, 7, 7])
np.random.default_rng(5).shuffle(LABELS)


def _per_image(pairs: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    same = pairs[:, 2] == 1
    return (
        np.bincount(pairs[same, 0], minlength=n),
        np.bincount(pairs[~same, 0], minlength=n),
    )


def test_sample_pairs_gives_four_and_four_per_image():
    pairs = sample_pairs(LABELS, 4, 4, seed=0)
    assert pairs.shape[1] == 3 and pairs.dtype == np.int64
    n_pos, n_neg = _per_image(pairs, len(LABELS))
    big = np.isin(LABELS, range(6))
    assert (n_pos[big] == 4).all() and (n_neg == 4).all()
    assert (n_pos[LABELS == 7] == 4).all()  # 2 others: each once, then with replacement
    assert n_pos[LABELS == 99].tolist() == [0]


def test_sample_pairs_labels_and_distinct_partners():
    pairs = sample_pairs(LABELS, 4, 4, seed=1)
    i, j, same = pairs.T
    assert (i != j).all()
    assert ((LABELS[i] == LABELS[j]) == (same == 1)).all()
    for anchor in np.flatnonzero(np.isin(LABELS, range(6))):
        rows = pairs[i == anchor]
        assert len(set(rows[rows[:, 2] == 1, 1])) == 4
        assert len(set(rows[rows[:, 2] == 0, 1])) == 4
    for anchor in np.flatnonzero(LABELS == 7):
        partners = pairs[(i == anchor) & (same == 1), 1]
        assert set(partners) == set(np.flatnonzero(LABELS == 7)) - {anchor}


def test_sample_pairs_rows_are_ordered_by_image_positives_first():
    pairs = sample_pairs(np.array([0, 0, 0, 1, 1, 1]), 2, 1, seed=0)
    assert pairs[:, 0].tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 5, 5, 5]
    assert pairs[:, 2].tolist() == [1, 1, 0] * 6


def test_sample_pairs_is_seeded():
    a = sample_pairs(LABELS, seed=3)
    assert np.array_equal(a, sample_pairs(LABELS, seed=3))
    assert not np.array_equal(a, sample_pairs(LABELS, seed=4))


def test_sample_pairs_uses_all_images_and_string_labels():
    labels = np.array(["cat", "dog", "cat", "dog", "cat", "dog"])
    pairs = sample_pairs(labels, 2, 3, seed=0)
    # 2 other members and 3 other-class images: every candidate is used exactly once.
    for anchor in range(6):
        rows = pairs[pairs[:, 0] == anchor]
        assert sorted(rows[rows[:, 2] == 0, 1]) == sorted(np.flatnonzero(labels != labels[anchor]))


def test_sample_pairs_draws_uniformly():
    # Anchors of the middle class draw negatives from the 5 + 5 images around it.
    labels = np.repeat([0, 1, 2], [5, 3000, 5])
    pairs = sample_pairs(labels, 4, 4, seed=0)
    anchors_in_1 = labels[pairs[:, 0]] == 1
    neg = np.bincount(pairs[anchors_in_1 & (pairs[:, 2] == 0), 1], minlength=len(labels))
    assert neg[5:3005].sum() == 0
    # 12,000 draws over 10 images: 1,200 expected each (sd about 35).
    assert np.abs(neg[np.r_[0:5, 3005:3010]] - 1200).max() < 150
    pos = pairs[(labels[pairs[:, 0]] == 0) & (pairs[:, 2] == 1)]
    # Each of the 4 others of a 5-member class is always chosen.
    assert len(pos) == 20 and len({tuple(r) for r in pos[:, :2]}) == 20


def test_sample_pairs_on_subsets_never_mixes_seen_and_unseen():
    labels = np.repeat(np.arange(10), 8)
    seen = np.flatnonzero(labels < 5)
    unseen = np.flatnonzero(labels >= 5)
    for idx in (seen, unseen):
        local = sample_pairs(labels[idx], seed=0)
        assert local[:, :2].min() >= 0 and local[:, :2].max() < len(idx)
        glob = idx[local[:, :2]]
        assert np.isin(glob, idx).all()
        assert ((labels[glob[:, 0]] == labels[glob[:, 1]]) == (local[:, 2] == 1)).all()


def test_sample_pairs_single_class_and_empty():
    pairs = sample_pairs(np.zeros(5, dtype=int), 4, 4)
    assert len(pairs) == 20 and (pairs[:, 2] == 1).all()
    assert sample_pairs(np.array([], dtype=int)).shape == (0, 3)


def test_sample_pairs_is_fast_for_10000_images():
    labels = np.random.default_rng(0).integers(0, 100, 10_000)
    start = time.perf_counter()
    pairs = sample_pairs(labels, 4, 4, seed=0)
    assert time.perf_counter() - start < 5
    assert len(pairs) == 80_000


def test_pair_distances():
    x = np.array([[0.0, 0.0], [3.0, 4.0], [1.0, 1.0]], dtype=np.float32)
    d = pair_distances(x, np.array([[0, 1, 0], [1, 2, 1], [2, 2, 1]]))
    np.testing.assert_allclose(d, [5.0, np.sqrt(13.0), 0.0])


def _accuracy(d: np.ndarray, same: np.ndarray, t: float) -> float:
    return float(((d <= t) == same).mean())


def test_choose_threshold_by_hand():
    d = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    same = np.array([1, 1, 0, 1, 0, 0])
    # Accepting up to 0.2 or up to 0.4 both give 5/6; the smaller threshold wins.
    assert choose_threshold(d, same) == pytest.approx(0.25)
    assert choose_threshold(d, np.ones(6)) == 0.6
    below = choose_threshold(d, np.zeros(6))
    assert below < 0.1 and _accuracy(d, np.zeros(6, bool), below) == 1.0


def test_choose_threshold_handles_ties_and_adjacent_floats():
    d = np.array([1.0, 1.0, 2.0, 2.0])
    assert choose_threshold(d, np.array([1, 1, 0, 0])) == 1.5
    a = 1.0
    b = np.nextafter(a, 2.0)
    t = choose_threshold(np.array([a, b]), np.array([1, 0]))
    assert a <= t < b


def test_choose_threshold_matches_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(20):
        n = int(rng.integers(1, 60))
        d = np.round(rng.random(n), 1)  # many ties
        same = rng.random(n) < 0.5
        t = choose_threshold(d, same)
        values = np.unique(d)
        candidates = np.concatenate([[values[0] - 1], (values[:-1] + values[1:]) / 2, values])
        best = max(_accuracy(d, same, c) for c in candidates)
        assert _accuracy(d, same, t) == best
        assert t in candidates or t < values[0]


def test_choose_threshold_rejects_empty_input():
    with pytest.raises(ValueError):
        choose_threshold(np.array([]), np.array([]))


def test_verification_metrics_by_hand():
    d = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    same = np.array([1, 0, 1, 0, 1, 0])
    m = verification_metrics(d, same, 0.35)
    # accepted: 0.1 (same), 0.2 (diff), 0.3 (same); rejected: 0.4, 0.5 (same), 0.6
    assert m["accuracy"] == pytest.approx(4 / 6)
    assert m["far"] == pytest.approx(1 / 3)
    assert m["frr"] == pytest.approx(1 / 3)
    assert m["precision"] == pytest.approx(2 / 3)
    assert m["recall"] == pytest.approx(2 / 3)
    assert (m["pairs"], m["positives"], m["negatives"], m["threshold"]) == (6, 3, 3, 0.35)
    # ranking by -d: same, diff, same, diff, same, diff -> AP = (1 + 2/3 + 3/5) / 3
    assert m["ap"] == pytest.approx((1 + 2 / 3 + 3 / 5) / 3)


def test_verification_metrics_ap_equals_sklearn_and_undefined_ratios():
    rng = np.random.default_rng(1)
    d, same = rng.random(200), rng.random(200) < 0.3
    m = verification_metrics(d, same, 0.5)
    assert m["ap"] == pytest.approx(average_precision_score(same, -d))
    assert m["recall"] == pytest.approx(1 - m["frr"])
    m = verification_metrics(np.array([1.0, 2.0]), np.array([0, 0]), 0.5)
    assert m["accuracy"] == 1.0 and m["far"] == 0.0
    assert np.isnan(m["frr"]) and np.isnan(m["precision"]) and np.isnan(m["ap"])


def test_pr_curve_thresholds_are_distances():
    rng = np.random.default_rng(2)
    d, same = rng.random(300), rng.random(300) < 0.5
    curve = pr_curve(d, same)
    assert list(curve.columns) == ["precision", "recall", "threshold"]
    assert curve["threshold"].is_monotonic_increasing
    assert curve["recall"].is_monotonic_increasing
    assert np.isin(curve["threshold"], d).all()
    assert curve["recall"].iloc[-1] == 1.0 and curve["threshold"].iloc[-1] >= d[same].max()
    for _, row in curve.sample(10, random_state=0).iterrows():
        m = verification_metrics(d, same, row["threshold"])
        assert m["precision"] == pytest.approx(row["precision"])
        assert m["recall"] == pytest.approx(row["recall"])


def _category_example() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    labels = np.array([0, 0, 1, 1, 2])
    pairs = np.array(
        [
            [0, 1, 1],  # class 0, accepted: correct
            [0, 2, 0],  # class 0, accepted: false accept
            [1, 0, 1],  # class 0, rejected: false reject
            [1, 4, 0],  # class 0, rejected: correct
            [2, 3, 1],  # class 1, accepted: correct
            [3, 4, 0],  # class 1, rejected: correct
            [4, 0, 0],  # class 2, accepted: false accept
        ]
    )
    d = np.array([0.1, 0.2, 0.9, 0.8, 0.3, 0.7, 0.4])
    return d, pairs, labels


def test_per_category_by_hand():
    d, pairs, labels = _category_example()
    table = per_category(d, pairs, labels, 0.5, class_names={0: "cat", 1: "dog", 2: "fox"})
    assert list(table.columns) == ["label", "class_name", "pairs", "accuracy", "far", "frr"]
    assert table["label"].tolist() == [1, 0, 2]
    assert table["class_name"].tolist() == ["dog", "cat", "fox"]
    assert table["pairs"].tolist() == [2, 4, 1]
    np.testing.assert_allclose(table["accuracy"], [1.0, 0.5, 0.0])
    np.testing.assert_allclose(table["far"], [0.0, 0.5, 1.0])
    np.testing.assert_allclose(table["frr"].iloc[:2], [0.0, 0.5])
    assert np.isnan(table["frr"].iloc[2])  # class 2 has no same pairs


def test_per_category_default_names_and_sequence_names():
    d, pairs, labels = _category_example()
    assert per_category(d, pairs, labels, 0.5)["class_name"].tolist() == ["1", "0", "2"]
    names = per_category(d, pairs, labels, 0.5, class_names=["a", "b", "c"])["class_name"]
    assert names.tolist() == ["b", "a", "c"]


def test_per_category_ties_sorted_by_label():
    pairs = np.array([[0, 1, 1], [1, 0, 1], [2, 0, 0]])
    table = per_category(np.zeros(3), pairs, np.array([5, 5, 3]), 0.5)
    assert table["label"].tolist() == [5, 3]
    table = per_category(np.full(3, 9.0), pairs, np.array([5, 5, 3]), 0.5)
    assert table["label"].tolist() == [3, 5]


def test_best_and_worst():
    table = pd.DataFrame(
        {
            "label": np.arange(8),
            "class_name": list("abcdefgh"),
            "pairs": 10,
            "accuracy": [0.5, 0.9, 0.1, 0.7, 0.9, 0.3, 0.6, 0.2],
            "far": 0.0,
            "frr": 0.0,
        }
    )
    out = best_and_worst(table, n=3)
    assert out["rank"].tolist() == ["best"] * 3 + ["worst"] * 3
    assert out["label"].tolist() == [1, 4, 3, 5, 7, 2]
    assert out["position"].tolist() == [1, 2, 3, 6, 7, 8]
    small = best_and_worst(table.iloc[:4], n=3)
    assert small["label"].tolist() == [1, 3, 0, 2]
    assert small["rank"].tolist() == ["best"] * 3 + ["worst"]


def test_distance_distributions():
    out = distance_distributions(np.array([1.0, 3.0, 4.0, 6.0, 8.0]), np.array([1, 1, 0, 0, 0]))
    assert out["same_mean"] == 2.0 and out["same_std"] == 1.0
    assert out["different_mean"] == 6.0
    assert out["different_std"] == pytest.approx(np.sqrt(8 / 3))
    assert out["separation"] == 4.0
    empty = distance_distributions(np.array([1.0]), np.array([1]))
    assert np.isnan(empty["different_mean"]) and np.isnan(empty["separation"])


def test_a_split_without_positive_or_negative_pairs_is_an_error_not_a_score():
    with pytest.raises(ValueError, match="needs positive .* 5 images in 5 class"):
        pairs_of(np.arange(5), 4)
    with pytest.raises(ValueError, match=r"needs negative \(two classes\) pairs"):
        pairs_of(np.zeros(5, dtype=int), 4)
    assert pairs_of(np.array([0, 0, 1, 1]), 1)[:, 2].tolist() == [1, 0] * 4
