"""k-means in torch (issue 44), NMI's clustering on a search device, run here on CPU tensors:
Lloyd's steps as scikit-learn takes them from the same start, faiss's rules for empty clusters,
sampling and restarts, and an NMI within the spread of faiss's over seeds."""

import numpy as np
import pytest
import torch
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs
from sklearn.metrics import normalized_mutual_info_score

import bench.evaluation.clustering as clustering
import bench.util.torch_kmeans as torch_kmeans
from bench.evaluation.clustering import nmi, nmi_best_of
from bench.evaluation.metrics import evaluate
from bench.util.knn import kmeans_assign
from bench.util.torch_kmeans import EPS, lloyd, nearest_centroid, split_empty, torch_kmeans_assign


def blobs(n: int = 3000, centers: int = 300, std: float = 3.0, seed: int = 0):
    x, y = make_blobs(n, 32, centers=centers, cluster_std=std, random_state=seed)
    return x.astype(np.float32), y


def test_lloyd_is_sklearns_lloyd_from_the_same_start():
    x, y = blobs(1200, 40, std=4.0)
    # A start in each blob, so that no cluster empties: scikit-learn re-seeds one elsewhere.
    start = x[[np.flatnonzero(y == c)[0] for c in range(40)]]
    theirs = KMeans(40, init=start, n_init=1, max_iter=15, tol=0, algorithm="lloyd").fit(x)
    rng = np.random.default_rng(0)
    centroids, objective = lloyd(torch.from_numpy(x), torch.from_numpy(start), 15, rng)
    ours = nearest_centroid(torch.from_numpy(x), centroids)[1].numpy()
    assert np.array_equal(ours, theirs.labels_)
    np.testing.assert_allclose(centroids.numpy(), theirs.cluster_centers_, atol=1e-4)
    # The objective is that of the last assignment, before its centroids moved (faiss's).
    assert objective >= theirs.inertia_ * (1 - 1e-5)


def test_an_empty_cluster_is_split_from_a_populous_one_as_faiss_does():
    centroids = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [4.0, 4.0, 4.0]])
    sizes = np.array([1, 0, 9])  # a single point's cluster is never split: (1 - 1) / (n - k)
    assert split_empty(centroids, sizes, np.random.default_rng(0)) == 1
    plus, minus = 1 + EPS, 1 - EPS
    expected = [[1, 2, 3], [4 * plus, 4 * minus, 4 * plus], [4 * minus, 4 * plus, 4 * minus]]
    assert torch.allclose(centroids, torch.tensor(expected), atol=0)
    assert sizes.tolist() == [1, 4, 5]


def test_duplicates_empty_clusters_without_losing_any():
    # 15 clusters of 10 distinct points: starts that coincide leave clusters empty.
    points = np.random.default_rng(0).normal(size=(10, 4)).astype(np.float32)
    x = np.repeat(points, 12, axis=0)
    assignment = torch_kmeans_assign(x, 15, "cpu", niter=10)
    assert assignment.min() >= 0 and assignment.max() < 15
    assert all(len(set(same)) == 1 for same in assignment.reshape(10, 12))  # copies together
    centroids, _ = lloyd(
        torch.from_numpy(x), torch.from_numpy(x[:15].copy()), 5, np.random.default_rng(0)
    )
    assert torch.isfinite(centroids).all()


def test_training_samples_at_most_max_points_per_centroid_as_faiss(monkeypatch):
    seen = []
    real = torch_kmeans.lloyd

    def recording(train, *args):
        seen.append(len(train))
        return real(train, *args)

    monkeypatch.setattr(torch_kmeans, "lloyd", recording)
    x, _ = blobs(1000, 10)
    assert len(torch_kmeans_assign(x, 10, "cpu", niter=2, max_points_per_centroid=5)) == 1000
    torch_kmeans_assign(x, 10, "cpu", niter=2, nredo=3)
    assert seen == [50, 1000, 1000, 1000]  # every point assigned in the end


def test_restarts_keep_the_start_of_lowest_objective():
    x, _ = blobs(600, 30)
    found = []
    for redo in range(4):  # each start alone, drawn as faiss seeds its starts
        rng = np.random.default_rng(7 + 1 + redo * torch_kmeans.REDO_STEP)
        start = torch.from_numpy(x[rng.permutation(len(x))[:30]])
        centroids, objective = lloyd(torch.from_numpy(x), start, 8, rng)
        found.append((objective, nearest_centroid(torch.from_numpy(x), centroids)[1].numpy()))
    assert len({objective for objective, _ in found}) == 4
    assert np.array_equal(torch_kmeans_assign(x, 30, "cpu", niter=8, seed=7), found[0][1])
    best = torch_kmeans_assign(x, 30, "cpu", niter=8, nredo=4, seed=7)
    assert np.array_equal(best, min(found, key=lambda f: f[0])[1])
    assert np.array_equal(best, torch_kmeans_assign(x, 30, "cpu", niter=8, nredo=4, seed=7))


@pytest.mark.parametrize("data", ["blobs", "digits"])
def test_nmi_on_a_device_lies_within_faiss_spread_over_seeds(data):
    if data == "blobs":
        x, y = blobs()
    else:
        from sklearn.datasets import load_digits

        x, y = load_digits(return_X_y=True)
        x = x.astype(np.float32)
    faiss_nmi = [
        normalized_mutual_info_score(y, kmeans_assign(x, len(set(y)), niter=20, seed=s))
        for s in range(8)
    ]
    low, high = min(faiss_nmi), max(faiss_nmi)
    margin = (high - low) / 2
    ours = [nmi(x, y, "cpu")] + [nmi_best_of(x, y, s, 2, "cpu") for s in range(2)]
    assert all(low - margin <= v <= high + margin + 0.01 for v in ours), (ours, faiss_nmi)
    assert nmi(x, y, "cpu") == nmi(x, y, "cpu")


def test_evaluate_clusters_on_the_device_it_searches_on(monkeypatch):
    calls = []
    real_torch, real_faiss = clustering.torch_kmeans_assign, clustering.kmeans_assign
    monkeypatch.setattr(
        clustering,
        "torch_kmeans_assign",
        lambda *a, **k: calls.append("torch") or real_torch(*a, **k),
    )
    monkeypatch.setattr(
        clustering, "kmeans_assign", lambda *a, **k: calls.append("faiss") or real_faiss(*a, **k)
    )
    x, y = blobs(400, 20)
    on_device, on_cpu = evaluate(x, y, device="cpu").metrics, evaluate(x, y).metrics
    assert calls == ["torch", "torch", "faiss", "faiss"]  # PML's run, then the best of 5
    assert on_device["nmi"] == pytest.approx(on_cpu["nmi"], abs=0.05)
    assert on_device["map@r"] == pytest.approx(on_cpu["map@r"], abs=1e-6)


def test_a_faiss_option_it_does_not_follow_is_an_error_not_ignored():
    x, _ = blobs(200, 5)
    with pytest.raises(TypeError, match="spherical"):
        torch_kmeans_assign(x, 5, "cpu", spherical=True)
    torch_kmeans_assign(x, 5, "cpu", min_points_per_centroid=1, verbose=False)  # they only silence
