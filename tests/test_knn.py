"""bench/util/knn.py: the GPU/CPU choice, the IVF search and its measured recall, k-means.

References are plain numpy (brute-force distances, Python sets); the GPU branch is run with a
stand-in for faiss's GPU API that records what is moved to the GPU and keeps it on the CPU.
"""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from bench.util import knn as knn_module
from bench.util.knn import (
    GPU_MAX_K,
    ExactRanking,
    FlatSearch,
    approximate_knn,
    ivf_knn,
    kmeans_assign,
    knn,
    nearest_in_order,
    recall_at_k,
    repeated_rows,
    search,
    uses_gpu,
)


def clustered(n: int, dims: int, clusters: int, spread: float = 0.3, seed: int = 0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(clusters, dims))
    return (centres[rng.integers(0, clusters, n)] + spread * rng.normal(size=(n, dims))).astype(
        np.float32
    )


def set_recall(found: np.ndarray, exact: np.ndarray) -> float:
    pairs = zip(found.tolist(), exact.tolist(), strict=True)
    return float(np.mean([len(set(f) & set(e)) / len(e) for f, e in pairs]))


def sq_distances(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    norms = (x**2).sum(1)
    return norms[:, None] + norms[None, :] - 2 * x @ x.T


def brute_knn(x: np.ndarray, k: int) -> np.ndarray:
    d = sq_distances(x)
    np.fill_diagonal(d, np.inf)
    return np.argsort(d, axis=1, kind="stable")[:, :k]


@pytest.mark.skipif(hasattr(faiss, "StandardGpuResources"), reason="faiss has GPU support here")
def test_faiss_without_gpu_support_runs_on_the_cpu():
    assert uses_gpu() is False


def test_recall_at_k_is_the_share_of_exact_neighbours_found():
    found, exact = np.array([[1, 2], [3, 4]]), np.array([[2, 1], [3, 5]])
    assert recall_at_k(found, exact) == 0.75


@pytest.fixture(scope="module")
def bank() -> np.ndarray:
    return clustered(5000, 32, clusters=50)


def test_approximate_knn_lists_are_self_excluded_and_report_their_recall(bank):
    k = 20
    dist, idx, recall = approximate_knn(bank, k, nprobe=3, recall_sample=1000)  # of 128 lists
    assert dist.shape == idx.shape == (len(bank), k)
    assert (idx >= 0).all() and not (idx == np.arange(len(bank))[:, None]).any()
    true = ((bank[idx].astype(np.float64) - bank[:, None, :]) ** 2).sum(-1)
    np.testing.assert_allclose(dist, true, rtol=1e-4, atol=1e-3)
    assert (np.diff(dist, axis=1) >= 0).all()
    full = set_recall(idx, knn(bank, k)[1])
    assert 0.9 <= full < 1.0
    assert recall == pytest.approx(full, abs=0.015)  # a 1000-query sample of the full recall


def test_ivf_probing_every_list_is_exact_search():
    x = clustered(1500, 16, clusters=20)  # no near-tie at the 10th neighbour (gap > 1e-4)
    _, exact = knn(x, 10)
    _, found, recall = approximate_knn(x, 10, nlist=16, nprobe=16)
    assert recall == 1.0
    assert [set(r) for r in found.tolist()] == [set(r) for r in exact.tolist()]
    assert [set(r) for r in exact.tolist()] == [set(r) for r in brute_knn(x, 10).tolist()]


def test_queries_with_too_few_probed_points_are_searched_exactly():
    x = clustered(300, 4, clusters=3, spread=1.0)
    _, idx = ivf_knn(x, 6, nlist=7, nprobe=1)  # ~43 points per list, some lists far fewer
    assert (idx >= 0).all() and not (idx == np.arange(300)[:, None]).any()
    _, tiny = ivf_knn(x[:40], 6, nlist=20, nprobe=1)  # 2 points a list: every row falls back
    assert [set(r) for r in tiny.tolist()] == [set(r) for r in brute_knn(x[:40], 6).tolist()]


def test_ivf_rejects_more_lists_than_points():
    with pytest.raises(ValueError, match="nlist <= 10"):
        ivf_knn(np.zeros((10, 2), np.float32), 3, nlist=11)


def test_kmeans_assign_is_faiss_kmeans_on_the_cpu(bank):
    options = {"niter": 20, "seed": 3, "min_points_per_centroid": 1}
    reference = faiss.Kmeans(32, 50, verbose=False, **options)
    reference.train(bank)
    expected = reference.index.search(bank, 1)[1][:, 0]
    assert np.array_equal(kmeans_assign(bank, 50, **options), expected)


def test_cpu_results_are_the_same_on_any_number_of_threads(monkeypatch):
    """faiss's BLAS product (|x|^2 + |y|^2 - 2 x.y, from 20 queries on) rounds by how its
    threads split it: on the CPU, faiss runs on faiss_threads() whatever the process's OpenMP
    setting, which it leaves as it found it (issue 22). Without that, these 2,400 x 512-d points
    got other distances on 2 and on 3 threads than on 1."""
    monkeypatch.setenv("NNGK_FAISS_GPU", "0")
    x = clustered(2400, 512, clusters=100, spread=1.0)
    before = faiss.omp_get_max_threads()
    found = {}
    try:
        for threads in (1, 2, 3):
            faiss.omp_set_num_threads(threads)
            dist, idx = search(x, x, 101)
            assignment = kmeans_assign(x, 40, niter=5, seed=1)
            ivf = ivf_knn(x, 10, nlist=40, nprobe=4)
            found[threads] = [a.tobytes() for a in (dist, idx, assignment, *ivf)]
            assert faiss.omp_get_max_threads() == threads
    finally:
        faiss.omp_set_num_threads(before)
    assert found[2] == found[1] and found[3] == found[1]


def test_faiss_threads_are_the_machines_or_the_environments(monkeypatch):
    from bench.util.knn import MAX_THREADS, THREADS_ENV, faiss_threads

    monkeypatch.delenv(THREADS_ENV, raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 64)
    assert faiss_threads() == MAX_THREADS
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert faiss_threads() == 2
    monkeypatch.setenv(THREADS_ENV, "3")
    assert faiss_threads() == 3
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv(THREADS_ENV, bad)
        with pytest.raises(ValueError, match=f"NNGK_FAISS_THREADS='{bad}': expected a positive"):
            faiss_threads()


def in_order(dist: np.ndarray, k: int) -> np.ndarray:
    """The plain reference: indices sorted by (distance, index), the first k."""
    return np.lexsort((np.arange(len(dist)), dist))[:k]


@pytest.mark.parametrize("sample", [None, 64])
def test_nearest_in_order_sorts_by_distance_then_index(monkeypatch, sample):
    """Ties (a third of the distances are 0, 1 or 2) in index order, whether the k-th distance
    is found by a partition of the row or bounded from a sample of it (64 of 2,000 here)."""
    if sample:
        monkeypatch.setattr(knn_module, "RANK_SAMPLE", sample)
    rng = np.random.default_rng(0)
    dist = rng.random(2000).astype(np.float32) * 10
    dist[rng.integers(0, 2000, 700)] = rng.integers(0, 3, 700)
    for k in (1, 5, 150, 667, 1999, 2000):
        assert np.array_equal(nearest_in_order(dist, k), in_order(dist, k)), k
    assert (knn_module._sample_bound(dist, 150) is None) == (sample is None)
    assert nearest_in_order(dist, 0).shape == (0,)


def test_a_sample_that_bounds_too_few_falls_back_to_the_whole_row(monkeypatch):
    """Every 20th distance small, the rest large: the sample's bound holds only the sampled
    items, fewer than k, and the whole row is partitioned instead."""
    monkeypatch.setattr(knn_module, "RANK_SAMPLE", 50)
    dist = np.full(1000, 100.0, np.float32) + np.arange(1000, dtype=np.float32)
    dist[::20] = np.arange(50)
    assert (dist <= knn_module._sample_bound(dist, 300)).sum() < 300
    assert np.array_equal(nearest_in_order(dist, 300), in_order(dist, 300))
    assert (dist <= knn_module._sample_bound(dist, 20)).sum() >= 20  # the sample suffices there


def test_distances_below_zero_count_as_zero_as_faiss_clamps_them(monkeypatch):
    """Rounding puts a duplicate's distance a little below 0: it ties with the exact zeros,
    in index order, and the bound read from a sample is never below 0."""
    dist = np.array([0.5, -1e-7, 0.0, -2e-7, 0.25, 0.0], np.float32)
    assert nearest_in_order(dist, 4).tolist() == [1, 2, 3, 5]
    assert nearest_in_order(dist, 2).tolist() == [1, 2]
    monkeypatch.setattr(knn_module, "RANK_SAMPLE", 50)
    rng = np.random.default_rng(3)
    dist = np.where(rng.random(1000) < 0.9, -rng.random(1000) * 1e-6, rng.random(1000))
    dist = dist.astype(np.float32)
    assert knn_module._sample_bound(dist, 10) == 0.0
    for k in (10, 950):
        assert np.array_equal(nearest_in_order(dist, k), in_order(np.maximum(dist, 0), k))


def test_nearest_in_order_refuses_distances_that_are_not_numbers():
    with pytest.raises(ValueError, match="embeddings hold NaN or infinity"):
        nearest_in_order(np.array([0.5, np.nan, np.nan], np.float32), 2)


@pytest.mark.parametrize("threads", ["1", "2"])
def test_exact_ranking_is_a_full_sort_of_the_distances(monkeypatch, threads):
    """Integer coordinates: exact distances, many ties and duplicates. Each query gets its own
    k (padded with -1), its own row left out by index, on any number of threads."""
    monkeypatch.setenv(knn_module.THREADS_ENV, threads)
    rng = np.random.default_rng(1)
    x = rng.integers(-2, 3, size=(400, 6)).astype(np.float32)
    d = sq_distances(x)
    ks = rng.integers(0, 400, 50)
    rows = rng.choice(400, 50, replace=False)
    found = ExactRanking(x)(x[rows], ks, rows)
    assert found.shape == (50, ks.max())
    for row, k, got in zip(rows, ks, found, strict=True):
        dist = d[row].copy()
        dist[row] = np.inf
        assert np.array_equal(got[:k], in_order(dist, k)) and (got[k:] == -1).all()
    gallery = ExactRanking(x[100:])(x[:3], np.array([300, 1, 7]))  # nothing left out
    for i, k in enumerate((300, 1, 7)):
        assert np.array_equal(gallery[i, :k], in_order(sq_distances(x)[i, 100:], k))


def test_equal_rows_tie_however_the_blas_rounds_their_products(monkeypatch):
    """A BLAS that rounds a product by where it sits (numpy's OpenBLAS on an AMD EPYC gave
    equal rows products 1 ulp apart; here every odd column is rounded one ulp up) still gives
    equal rows one distance, so they come in index order, as faiss orders equal distances."""
    rng = np.random.default_rng(5)
    points = rng.normal(size=(6, 8)).astype(np.float32)
    base = points[rng.integers(0, 6, 60)]
    queries = rng.normal(size=(5, 8)).astype(np.float32)
    real = np.matmul

    def by_column(a, b, out=None):
        out = real(a, b, out=out)
        out[:, 1::2] = np.nextafter(out[:, 1::2], np.float32(np.inf))
        return out

    monkeypatch.setattr(np, "matmul", by_column)
    found = ExactRanking(base)(queries, np.full(5, 60))
    reference = sq_distances(np.concatenate([queries, base]))[:5, 5:]
    for got, dist in zip(found, reference, strict=True):
        assert np.array_equal(got, in_order(dist, 60))


def test_repeated_rows_are_found_bit_for_bit():
    x = np.array([[1, 2], [3, 4], [1, 2], [1, 2], [3, 4], [0, 0], [-0.0, 0]], np.float32)
    copies, originals = repeated_rows(x)
    assert copies.tolist() == [2, 3, 4] and originals.tolist() == [0, 0, 1]  # -0.0 is not 0.0
    assert [a.tolist() for a in repeated_rows(np.zeros((3, 0), np.float32))] == [[1, 2], [0, 0]]
    assert [len(a) for a in repeated_rows(np.zeros((0, 4), np.float32))] == [0, 0]


class FakeGpu:
    """faiss's GPU API on the CPU: resources counted, moved indexes recorded and kept."""

    def __init__(self, monkeypatch):
        self.resources, self.moved, self.nprobes, self.kmeans = 0, [], [], []
        fake = self

        class Resources:
            def __init__(self):
                fake.resources += 1

        class ParameterSpace(faiss.ParameterSpace):
            def set_index_parameter(self, index, name, value):
                fake.nprobes.append(value)
                super().set_index_parameter(index, name, value)

        class Kmeans(faiss.Kmeans):
            def __init__(self, d, k, gpu=False, **options):
                fake.kmeans.append(gpu)
                super().__init__(d, k, **options)

        def to_gpu(resources, device, index):
            assert isinstance(resources, Resources) and device == 0
            fake.moved.append(type(index).__name__)
            return index

        monkeypatch.setattr(knn_module, "_gpu_resources", None)
        monkeypatch.setattr(faiss, "StandardGpuResources", Resources, raising=False)
        monkeypatch.setattr(faiss, "get_num_gpus", lambda: 1)
        monkeypatch.setattr(faiss, "index_cpu_to_gpu", to_gpu, raising=False)
        monkeypatch.setattr(faiss, "GpuParameterSpace", ParameterSpace, raising=False)
        monkeypatch.setattr(faiss, "Kmeans", Kmeans)


def test_a_visible_gpu_is_used_unless_turned_off(monkeypatch):
    fake = FakeGpu(monkeypatch)
    monkeypatch.setenv("NNGK_FAISS_GPU", "1")
    assert uses_gpu() is True
    x = clustered(300, 8, clusters=5)
    _, idx = search(x, x[:7], 5)
    assert fake.moved == ["IndexFlatL2"]
    assert [set(r) for r in knn(x, 4)[1].tolist()] == [set(r) for r in brute_knn(x, 4).tolist()]
    ivf_knn(x, 4, nlist=4, nprobe=3)
    assert fake.moved[-1] == "IndexIVFFlat" and fake.nprobes == [3]
    kmeans_assign(x, 5)
    assert fake.kmeans == [True] and fake.resources == 1  # one set of resources, reused
    monkeypatch.setenv("NNGK_FAISS_GPU", "0")
    assert uses_gpu() is False
    kmeans_assign(x, 5)
    search(x, x[:7], 5)
    assert fake.kmeans == [True, False] and len(fake.moved) == 3


def test_the_gpu_keeps_to_its_limit_of_2048_results_and_probes(monkeypatch):
    fake = FakeGpu(monkeypatch)
    monkeypatch.delenv("NNGK_FAISS_GPU", raising=False)
    x = clustered(GPU_MAX_K + 60, 2, clusters=3)
    _, idx = search(x, x[:3], GPU_MAX_K + 1)
    assert idx.shape == (3, GPU_MAX_K + 1) and fake.moved == []  # searched on the CPU
    ivf_knn(x, 3, nlist=GPU_MAX_K + 50, nprobe=GPU_MAX_K + 50)
    assert fake.moved == ["IndexIVFFlat"] and fake.nprobes == [GPU_MAX_K]


def test_a_chunked_search_copies_its_base_to_the_gpu_once(monkeypatch):
    """The evaluator's chunks share one GPU index; a chunk that asks for more than 2,048
    neighbours is searched by a CPU index beside it, with the exact search's results."""
    fake = FakeGpu(monkeypatch)
    monkeypatch.delenv("NNGK_FAISS_GPU", raising=False)
    x = clustered(GPU_MAX_K + 60, 2, clusters=3)
    flat = FlatSearch(x, len(x))
    found = [flat(x[start : start + 10], 5)[1] for start in (0, 10, 20)]
    assert fake.moved == ["IndexFlatL2"]
    assert np.array_equal(np.concatenate(found), search(x, x[:30], 5)[1])  # its own GPU index
    _, idx = flat(x[:3], GPU_MAX_K + 1)
    assert idx.shape == (3, GPU_MAX_K + 1) and fake.moved == ["IndexFlatL2"] * 2
    assert np.array_equal(idx, search(x, x[:3], GPU_MAX_K + 1)[1])


def test_run_takes_the_nngk_index_and_records_the_neighbour_recall(tmp_path):
    import pandas as pd
    from click.testing import CliRunner

    from bench.cli import main

    args = ["run", "--dataset", "glyphs:classes=16,instances=10,size=12", "--dims", "8"]
    args += ["--epochs", "1", "--results", str(tmp_path)]
    out = CliRunner().invoke(main, [*args, "--loss", "nngk", "--index", "ivf", "--nprobe", "2"])
    assert out.exit_code == 0, out.output
    (run,) = tmp_path.glob("*nngk*")
    recall = pd.read_csv(run / "history.csv")["neighbour_recall"]
    assert len(recall) == 1 and 0 < recall[0] <= 1
    refused = CliRunner().invoke(main, [*args, "--loss", "contrastive", "--index", "ivf"])
    assert refused.exit_code != 0 and "does not take --index" in refused.output
