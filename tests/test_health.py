"""Embedding health (issue 16): principal components and class distances of an embedding,
against hand-computed cases, scikit-learn's PCA and plain loops, computed in numpy and faiss (a
run on the CPU) and in torch (a run's device, on CPU tensors here); and its report table."""

import io
import itertools
import math
import tracemalloc
from collections import Counter

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.spatial.distance import pdist
from sklearn.decomposition import PCA

from bench.evaluation.health import (
    HEALTH_KEYS,
    different_class_pairs,
    embedding_health,
    pair_distances,
    pair_means,
    same_class_pairs,
)
from bench.report.health import health_files
from bench.report.runs import load_runs
from bench.runs import store
from bench.util.atomic import atomic_write_json
from tests.test_report_tables import make_run, md_rows

NAN = float("nan")


@pytest.fixture(params=[None, torch.device("cpu")], ids=["numpy", "torch"])
def device(request):
    """Where the health's costly parts run: numpy and faiss (None), or torch on a device."""
    return request.param


def axes(scales, dims: int) -> np.ndarray:
    """A point at +s and one at -s on axis k for each scale s (mean 0)."""
    eye = np.eye(dims)
    return np.array([sign * s * eye[k] for k, s in enumerate(scales) for sign in (1, -1)])


def loop_means(x: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """(intra mean, inter mean) with plain loops over all pairs."""
    intra, inter = [], []
    for i, j in itertools.combinations(range(len(x)), 2):
        d = math.dist(x[i], x[j])
        (intra if labels[i] == labels[j] else inter).append(d)
    return sum(intra) / len(intra), sum(inter) / len(inter)


def test_points_on_three_axes(device):
    # Variances along the axes 2*9, 2*4, 2*1 of 28: 64 %, then 93 % with two, all with three.
    h = embedding_health(axes([3, 2, 1], 8), np.array([0, 0, 1, 1, 2, 2]), device=device)
    assert h["health_pca_dims"] == 8
    assert h["health_pca_components_90"] == 2 and h["health_pca_components_99"] == 3
    assert h["health_pca_first_share"] == pytest.approx(18 / 28)
    # Same class: the two ends of an axis, 6, 4 and 2 apart; different classes: 4 pairs across
    # each two axes, sqrt(9 + 4), sqrt(9 + 1), sqrt(4 + 1) apart. Every class mean is 0.
    inter = (math.sqrt(13) + math.sqrt(10) + math.sqrt(5)) / 3
    assert h["health_intra_class_distance_mean"] == pytest.approx(4.0)
    assert h["health_inter_class_distance_mean"] == pytest.approx(inter)
    assert h["health_intra_inter_ratio"] == pytest.approx(4.0 / inter)
    assert h["health_inter_class_centroid_distance_min"] == pytest.approx(0.0, abs=1e-12)
    assert set(h) == set(HEALTH_KEYS)


def test_equal_axes_tie_exactly_at_the_threshold(device):
    h = embedding_health(axes([1.0] * 10, 16), np.repeat(np.arange(10), 2), device=device)
    assert h["health_pca_components_90"] == 9  # 9 of 10 equal variances are exactly 90 %
    assert h["health_pca_components_99"] == 10
    assert h["health_pca_first_share"] == pytest.approx(0.1)


@pytest.mark.parametrize("n, dims", [(400, 24), (20, 64)])  # covariance and Gram matrix
def test_components_match_sklearn_pca(n, dims, device):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((n, dims)) * np.geomspace(10, 0.01, dims)).astype(np.float32)
    ratio = PCA().fit(x.astype(np.float64)).explained_variance_ratio_
    h = embedding_health(x, rng.integers(0, 4, n), device=device)
    for share in (90, 99):
        expected = int(np.searchsorted(np.cumsum(ratio), share / 100)) + 1
        assert h[f"health_pca_components_{share}"] == expected
    assert h["health_pca_first_share"] == pytest.approx(ratio[0], rel=1e-6)


def test_distances_match_plain_loops(device):
    rng = np.random.default_rng(2)
    labels = rng.integers(0, 5, 60)
    x = rng.standard_normal((60, 6)) + 2 * labels[:, None]
    h = embedding_health(x, labels, device=device)
    intra, inter = loop_means(x, labels)
    means = [x[labels == c].mean(axis=0) for c in range(5)]
    closest = min(math.dist(a, b) for a, b in itertools.combinations(means, 2))
    assert h["health_intra_class_distance_mean"] == pytest.approx(intra)
    assert h["health_inter_class_distance_mean"] == pytest.approx(inter)
    assert h["health_intra_inter_ratio"] == pytest.approx(intra / inter)
    assert h["health_inter_class_centroid_distance_min"] == pytest.approx(closest)
    x32 = x.astype(np.float32)  # distances of float32 rows, summed in float64
    h32 = embedding_health(x32, labels, device=device)
    intra32, inter32 = loop_means(x32.astype(np.float64), labels)
    assert h32["health_intra_class_distance_mean"] == pytest.approx(intra32, rel=1e-6)
    assert h32["health_inter_class_distance_mean"] == pytest.approx(inter32, rel=1e-6)


def test_pair_distances_are_the_same_to_the_bit_in_chunks_of_any_size(monkeypatch):
    from bench.evaluation import health

    rng = np.random.default_rng(3)
    x = rng.standard_normal((300, 1024)).astype(np.float32)
    i, j = rng.integers(0, 300, 5000), rng.integers(0, 300, 5000)
    pairs = zip(i, j, strict=True)
    plain = np.array([np.linalg.norm((x[a] - x[b]).astype(np.float64)) for a, b in pairs])
    found = {}
    for values in (1 << 10, 1 << 16, 1 << 22):  # 1 pair a chunk, 64, all 5,000
        monkeypatch.setattr(health, "PAIR_CHUNK_VALUES", values)
        monkeypatch.setattr(health, "CHUNK_VALUES", values)  # a device's chunks
        found[values] = pair_distances(x, i, j)
        np.testing.assert_allclose(found[values], plain, rtol=1e-12)
        # torch's on a device (CPU tensors here): the same to float64 rounding
        np.testing.assert_allclose(pair_distances(torch.from_numpy(x), i, j), plain, rtol=1e-12)
    assert np.array_equal(found[1 << 10], found[1 << 16])
    assert np.array_equal(found[1 << 16], found[1 << 22])


def test_two_tight_clusters_far_apart(device):
    rng = np.random.default_rng(3)
    labels = np.repeat([0, 1], 50)
    x = 0.01 * rng.standard_normal((100, 16)) + 100.0 * labels[:, None] * np.eye(16)[0]
    h = embedding_health(x, labels, device=device)
    assert h["health_intra_inter_ratio"] < 1e-3
    assert h["health_inter_class_distance_mean"] == pytest.approx(100, rel=1e-3)
    assert h["health_inter_class_centroid_distance_min"] == pytest.approx(100, rel=1e-3)
    assert h["health_pca_components_99"] == 1  # all but a trace of the variance on one axis
    assert h["health_pca_first_share"] > 0.999


def test_sampled_pairs_are_uniform_over_pairs_of_their_kind():
    labels = np.array([0, 0, 0, 1, 1, 2])  # same class: 3 + 1 pairs; different: 15 - 4 = 11
    rng = np.random.default_rng(4)
    for sampler, expected in ((same_class_pairs, 4), (different_class_pairs, 11)):
        i, j = sampler(labels, rng, 44_000)
        assert ((labels[i] == labels[j]) == (sampler is same_class_pairs)).all()
        counts = Counter(map(frozenset, zip(i.tolist(), j.tolist(), strict=True)))
        assert all(len(pair) == 2 for pair in counts) and len(counts) == expected
        assert all(c / 44_000 == pytest.approx(1 / expected, abs=0.01) for c in counts.values())


def test_sampled_means_approach_the_exact_ones():
    rng = np.random.default_rng(5)
    labels = rng.choice(40, size=3000, p=np.arange(1, 41) / 820)  # unequal classes
    x = rng.standard_normal((3000, 16)) + rng.standard_normal((40, 16))[labels]
    exact = pair_means(x, labels, seed=0, max_pairs=10**7)  # 4.5 million pairs: all
    sampled = pair_means(x, labels, seed=0)
    assert sampled == pytest.approx(exact, rel=0.005)
    assert sampled != exact and sampled == pair_means(x, labels, seed=0)  # seeded


def test_constant_embeddings_have_no_components(device):
    h = embedding_health(
        np.full((6, 4), 0.1, dtype=np.float32), np.array([0, 0, 0, 1, 1, 1]), device=device
    )
    assert h["health_pca_components_90"] == h["health_pca_components_99"] == 0
    assert math.isnan(h["health_pca_first_share"]) and math.isnan(h["health_intra_inter_ratio"])
    assert h["health_intra_class_distance_mean"] == h["health_inter_class_distance_mean"] == 0
    assert h["health_inter_class_centroid_distance_min"] == 0


def test_a_single_class_or_singletons_leave_the_undefined_numbers_nan(device):
    x = axes([3, 2, 1], 4)
    one = embedding_health(x, np.zeros(6, dtype=int), device=device)
    distances = [math.dist(a, b) for a, b in itertools.combinations(x, 2)]
    assert one["health_intra_class_distance_mean"] == pytest.approx(np.mean(distances))
    for key in (
        "inter_class_distance_mean",
        "intra_inter_ratio",
        "inter_class_centroid_distance_min",
    ):
        assert math.isnan(one[f"health_{key}"])
    singletons = embedding_health(x, np.arange(6), device=device)
    assert math.isnan(singletons["health_intra_class_distance_mean"])
    assert math.isnan(singletons["health_intra_inter_ratio"])
    assert singletons["health_pca_components_99"] == 3


def test_non_finite_or_malformed_input(device):
    x = axes([3, 2, 1], 4)
    x[0, 0] = np.nan
    h = embedding_health(x, np.arange(6), device=device)
    assert h["health_pca_dims"] == 4
    assert all(math.isnan(v) for k, v in h.items() if k != "health_pca_dims")
    with pytest.raises(ValueError):
        embedding_health(np.zeros((0, 4)), np.zeros(0), device=device)
    with pytest.raises(ValueError):
        embedding_health(np.zeros((3, 4)), np.zeros(2), device=device)


def test_nan_survives_metrics_json(tmp_path):
    h = embedding_health(axes([3, 2, 1], 4), np.zeros(6, dtype=int))
    atomic_write_json(tmp_path / store.METRICS, h)
    read = store.read_metrics(tmp_path)
    assert read.keys() == h.keys() and math.isnan(read["health_intra_inter_ratio"])
    assert read["health_pca_components_99"] == 3


# ---------------------------------------------------------------- report


def health(c90, ratio, dims=16, intra=1.0) -> dict:
    values = dict.fromkeys(HEALTH_KEYS, 0.5)
    values.update(health_pca_dims=dims, health_pca_components_90=c90)
    values.update(health_intra_class_distance_mean=intra, health_intra_inter_ratio=ratio)
    return values


def test_health_table_averages_seeds_per_loss_and_size(tmp_path):
    r = tmp_path / "results"
    make_run(r, "nngk-0", loss="nngk", seed=0, **{"map@r": 0.6}, **health(7, 0.2))
    make_run(r, "nngk-1", loss="nngk", seed=1, **{"map@r": 0.7}, **health(8, NAN, intra=2.0))
    make_run(r, "npair-0", loss="npair", seed=0, **{"map@r": 0.1}, **health(1, 0.9))
    make_run(r, "npair-1", loss="npair", seed=1, **{"map@r": 0.2}, **health(2, 0.7))
    make_run(r, "nngk-32", loss="nngk", dims=32, **{"map@r": 0.3}, **health(20, 0.4, dims=32))
    make_run(r, "old", loss="softmax", **{"map@r": 0.9})  # no health numbers: left out
    runs, problems = load_runs(r)
    files = health_files(runs, "digits")
    assert problems == [] and set(files) == {"digits-health.md", "digits-health.csv"}
    text = files["digits-health.md"].decode()
    assert "Setup: " in text and "principal components" in text
    rows = md_rows(text)
    assert rows[0][:4] == ["loss", "dims", "PCs for 90 %", "PCs for 99 %"]
    # By size, then MAP@R best first; means over seeds, a NaN left out.
    assert [(row[0], row[1]) for row in rows[1:]] == [
        ("nngk", "16"),
        ("npair", "16"),
        ("nngk", "32"),
    ]
    assert rows[1] == [
        "nngk",
        "16",
        "7.5 of 16",
        "0.5 of 16",
        "50.0",
        "1.5",
        "0.5",
        "0.200",
        "0.5",
        "65.00",
        "2",
    ]
    assert rows[2][2] == "1.5 of 16" and rows[2][7] == "0.800" and rows[2][9] == "15.00"
    assert rows[3][2] == "20 of 32" and rows[3][-1] == "1"
    csv = pd.read_csv(io.BytesIO(files["digits-health.csv"])).set_index(["method", "dims"])
    assert csv.loc[("nngk", 16), "health_intra_class_distance_mean"] == pytest.approx(1.5)
    assert csv.loc[("npair", 16), "health_intra_inter_ratio"] == pytest.approx(0.8)
    assert csv.loc[("npair", 16), "map@r"] == pytest.approx(0.15)
    assert "softmax" not in csv.index.get_level_values("method")


def test_no_health_files_for_runs_without_health(tmp_path):
    make_run(tmp_path / "results", "old", loss="nngk")
    runs, _ = load_runs(tmp_path / "results")
    assert health_files(runs, "digits") == {}


def test_a_large_float32_embedding_is_never_copied_to_float64_whole():
    # 60,000 x 256 float32 (61 MB): the covariance, the mean square and the class means are
    # summed a chunk of rows at a time; before, three float64 copies (123 MB each) were held.
    rng = np.random.default_rng(0)
    x = rng.standard_normal((60_000, 256), dtype=np.float32)
    labels = rng.integers(0, 1_000, len(x))
    tracemalloc.start()
    try:
        health = embedding_health(x, labels)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < x.size * 8  # under one float64 copy
    assert health["health_pca_dims"] == 256 and health["health_pca_components_99"] > 200
    # The class means by pandas, their closest pair by scipy's pairwise distances (a float64
    # array of every pair's differences, as this test held before, was 2 GB).
    centroids = pd.DataFrame(x.astype(np.float64)).groupby(labels).mean().to_numpy()
    closest = pdist(centroids).min()
    assert health["health_inter_class_centroid_distance_min"] == pytest.approx(closest)
