"""k-nearest-neighbour search and k-means (faiss): the one place the harness makes faiss indexes.

Exact search is a flat squared-L2 index; `approximate_knn` is an IVF-Flat index with its recall
measured against exact search. Both, and k-means, run on the GPU when faiss has GPU support and
sees a GPU (unless NNGK_FAISS_GPU=0), on the CPU otherwise.

On the CPU, faiss runs on `faiss_threads()` threads whatever the process's own thread count, so
that runs on one machine agree to the bit (issue 22): faiss computes squared
distances as |x|^2 + |y|^2 - 2 x.y with a BLAS matrix product (OpenBLAS, from 20 queries on),
whose rounding depends on how many threads share it. At NNGK's first refresh on glyphs (2,400 x
512-d) one thread and two gave distances up to 3e-7 apart and 22 of the 2,400 neighbour lists in
another order, and so NNGK gradients that differed from the first step on.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import faiss
import numpy as np

GPU_ENV = "NNGK_FAISS_GPU"
# faiss's GPU k-selection handles at most this many results per query, and as many IVF probes.
GPU_MAX_K = 2048
# faiss's CPU flat search multiplies queries by the base in blocks of this many (4096).
QUERY_BLOCK = faiss.cvar.distance_compute_blas_query_bs
MIN_POINTS_PER_LIST = 39  # faiss warns when k-means has fewer training points per centroid
MAX_POINTS_PER_LIST = 256  # and samples down to this many itself: we sample first, seeded
THREADS_ENV = "NNGK_FAISS_THREADS"
MAX_THREADS = 8  # a default beyond this would mostly oversubscribe a job's share of a big node
RANK_SAMPLE = 4096  # distances sampled per row to bound ExactRanking's k-th (see below)


def faiss_threads() -> int:
    """faiss's threads on the CPU: $NNGK_FAISS_THREADS, else the machine's cores (at most 8). A
    constant of the machine, not of the process (OMP_NUM_THREADS, torch.set_num_threads and a
    job's CPU affinity change those), so that runs on one machine agree to the bit. On 2 quiet
    cores, 2 threads searched 20,000 x 64-d (k 101) 1.6x as fast as one."""
    text = os.environ.get(THREADS_ENV, "").strip()
    if not text:
        return min(os.cpu_count() or 1, MAX_THREADS)
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"${THREADS_ENV}={text!r}: expected a positive number of threads")
    return int(text)


_gpu_resources = None


def _as_float32(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(x, dtype=np.float32))


def uses_gpu() -> bool:
    """Whether faiss searches and clusters on a GPU: it has GPU support, sees a GPU, and
    NNGK_FAISS_GPU is not 0."""
    if os.environ.get(GPU_ENV, "1").strip() == "0":
        return False
    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


@contextmanager
def cpu_threads(gpu: bool = False) -> Iterator[None]:
    """faiss's CPU work inside runs on `faiss_threads()` threads (the OpenMP setting of this
    thread, which torch may share, restored after); nothing changes for work on the GPU."""
    if gpu:
        yield
        return
    threads = faiss_threads()
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(threads)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


def _to_gpu(index: faiss.Index) -> faiss.Index:
    """The index on the first visible GPU, with one set of GPU resources for the process."""
    global _gpu_resources
    if _gpu_resources is None:
        _gpu_resources = faiss.StandardGpuResources()
    return faiss.index_cpu_to_gpu(_gpu_resources, 0, index)


def _gpu_for(k: int) -> bool:
    # A search for more than GPU_MAX_K results fails on the GPU: it stays on the CPU.
    return uses_gpu() and k <= GPU_MAX_K


@contextmanager
def _blas_kernel(always: bool) -> Iterator[None]:
    """Inside, faiss's CPU flat search computes distances with its BLAS kernel however few the
    queries (it otherwise takes them one by one below 128,000 query floats: other rounding)."""
    if not always:
        yield
        return
    before = faiss.cvar.distance_compute_blas_threshold
    faiss.cvar.distance_compute_blas_threshold = 0
    try:
        yield
    finally:
        faiss.cvar.distance_compute_blas_threshold = before


class FlatSearch:
    """Exact (flat) squared-L2 search of one base for `total` queries that come in chunks.

    The index is made once (and copied to the GPU once). On the CPU each chunk's distances are
    computed as one search of all `total` queries computes them: by the same kernel (faiss picks
    it by the number of queries in a call) and, for chunks of whole 4096-query blocks
    (`QUERY_BLOCK`) starting on a block, by the very same BLAS products, so to the bit.
    """

    def __init__(self, base: np.ndarray, total: int) -> None:
        self.base = _as_float32(base)
        dims = self.base.shape[1]
        self.blas = total * dims >= faiss.cvar.distance_compute_blas_threshold
        self._indexes: dict[bool, faiss.Index] = {}

    def _index(self, gpu: bool) -> faiss.Index:
        if gpu not in self._indexes:
            index = faiss.IndexFlatL2(self.base.shape[1])
            index = _to_gpu(index) if gpu else index
            with cpu_threads(gpu):
                index.add(self.base)
            self._indexes[gpu] = index
        return self._indexes[gpu]

    def __call__(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The k nearest rows of the base for every query: (distances, indices)."""
        k = min(k, len(self.base))
        gpu = _gpu_for(k)
        index = self._index(gpu)
        with cpu_threads(gpu), _blas_kernel(self.blas and not gpu):
            return index.search(_as_float32(queries), k)


class ExactRanking:
    """The nearest base rows of each query in (distance, index) order, as many as each query
    asks for (up to every row), without faiss's top-k selection, which for a k in the
    thousands costs more than the distances themselves (docs/speed.md).

    Distances are faiss's formula, |q|^2 + |y|^2 - 2 q.y in float32 (below 0 counted as 0), the
    product by numpy's BLAS (whose rounding, like faiss's, can depend on how many queries it
    multiplies at once, not on its threads). Each query's k-th distance is bounded, the rows
    within the bound sorted by (distance, index): equal distances in index order, as faiss
    orders them. Rows are ranked on `faiss_threads()` threads (numpy's sort, partition and
    arithmetic release the GIL), each with buffers of its own for the whole row.

    A base row equal to an earlier one gets that one's distance: some BLAS kernels round a
    product by where it sits in the matrix (numpy's OpenBLAS on an AMD EPYC with AVX-512 gave
    equal rows products 1 ulp apart), and equal rows must tie, to come in index order.
    """

    def __init__(self, base: np.ndarray) -> None:
        self.base = _as_float32(base)
        if len(self.base) >= 2**32:
            raise ValueError(f"ExactRanking ranks at most 2**32 - 1 rows, got {len(self.base)}")
        self.copies, self.originals = repeated_rows(self.base)
        self.norms = np.einsum("ij,ij->i", self.base, self.base)
        self.norms[self.copies] = self.norms[self.originals]
        self._dist = np.empty((0, len(self.base)), np.float32)  # reused: no page faults a call

    def __call__(
        self, queries: np.ndarray, ks: np.ndarray, exclude: np.ndarray | None = None
    ) -> np.ndarray:
        """Row i: the ks[i] nearest base rows of query i (base row exclude[i] left out), then -1
        up to max(ks) columns."""
        q = _as_float32(queries)
        ks = np.minimum(np.asarray(ks), len(self.base) - (exclude is not None))
        if len(self._dist) < len(q):
            self._dist = np.empty((len(q), len(self.base)), np.float32)
        dist = np.matmul(q, self.base.T, out=self._dist[: len(q)])
        if len(self.copies):
            dist[:, self.copies] = dist[:, self.originals]
        dist *= -2
        q_norms = np.einsum("ij,ij->i", q, q)
        out = np.full((len(q), int(ks.max(initial=0))), -1, dtype=np.int64)
        local = threading.local()

        def rank(i: int) -> None:
            if not hasattr(local, "sums"):  # this thread's buffers, a row each
                local.sums, local.below = np.empty_like(self.norms), np.empty(len(dist[i]), bool)
            row = dist[i]
            row += np.add(self.norms, q_norms[i], out=local.sums)  # faiss's order of sums
            if exclude is not None:
                row[exclude[i]] = np.inf
            out[i, : ks[i]] = nearest_in_order(row, int(ks[i]), local.below)

        with ThreadPoolExecutor(faiss_threads()) as pool:
            list(pool.map(rank, range(len(q))))
        return out


def repeated_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows of x equal (bit for bit) to an earlier row, and the first row each equals."""
    x = np.ascontiguousarray(x)
    if not x.shape[1]:  # rows of nothing: all equal
        return np.arange(1, len(x)), np.zeros(max(len(x) - 1, 0), np.int64)
    rows = x.view(np.dtype((np.void, x.dtype.itemsize * x.shape[1]))).ravel()
    _, first, which = np.unique(rows, return_index=True, return_inverse=True)
    originals = first[which.ravel()]
    copies = np.flatnonzero(originals != np.arange(len(x)))
    return copies, originals[copies]


def nearest_in_order(dist: np.ndarray, k: int, below: np.ndarray | None = None) -> np.ndarray:
    """Indices of the k smallest of `dist` (float32; a value below 0 counts as 0, as faiss
    clamps it), sorted by (distance, index); `below`: a boolean buffer of dist's length. The
    sort key is the distance's bits above the index: for floats of one sign the bits order as
    the values."""
    if k <= 0:
        return np.empty(0, dtype=np.int64)
    bound = _sample_bound(dist, k)
    cols = None if bound is None else np.flatnonzero(np.less_equal(dist, bound, out=below))
    if cols is None or len(cols) < k:  # the sample's bound holds too few: the whole row
        kth = max(np.partition(dist, k - 1)[k - 1], 0)
        cols = np.flatnonzero(np.less_equal(dist, kth, out=below))  # ties at the k-th too
    if len(cols) < k:  # NaN compares false
        raise ValueError("distances that are not numbers: the embeddings hold NaN or infinity")
    keys = np.maximum(dist[cols], 0).view(np.uint32).astype(np.uint64) << np.uint64(32)
    keys |= cols.astype(np.uint64)
    keys.sort()
    return (keys[:k] & np.uint64(0xFFFFFFFF)).astype(np.int64)


def _sample_bound(dist: np.ndarray, k: int) -> float | None:
    """A distance a little above the k-th smallest of `dist` (about 1.05 k at or below it),
    read from every n/RANK_SAMPLE-th distance: a partition of the sample for one of the row (at
    a million items, 0.08 ms for 10.6 ms, here). None where the sample would be the whole row."""
    step = len(dist) // RANK_SAMPLE
    if step < 2:
        return None
    sample = dist[::step]
    j = min(len(sample) - 1, math.ceil(1.05 * k / step) + 32)
    return max(float(np.partition(sample, j)[j]), 0.0)


def search(base: np.ndarray, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact (flat) squared-L2 k nearest rows of `base` for every query: (distances, indices)."""
    return FlatSearch(base, len(queries))(queries, k)


def query_chunks(n: int, rows: int) -> list[tuple[int, int]]:
    """(start, stop) of n queries in chunks of `rows`, in order. A last chunk of fewer queries
    than faiss's threads joins the one before: faiss would split the base among its threads
    for it, with products (and rounding) of its own."""
    starts = list(range(0, n, max(rows, 1)))
    if len(starts) > 1 and n - starts[-1] < faiss_threads():
        starts.pop()
    return list(zip(starts, [*starts[1:], n], strict=False))


def _not_self(idx: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Mask of the k of each query's k + 1 results that are not the query (base row `rows[i]`)."""
    is_self = idx == rows[:, None]
    # Rows where ties pushed the query out of its own top k+1 drop their last neighbour instead.
    missing = ~is_self.any(axis=1)
    is_self[missing, -1] = True
    return ~is_self


def _drop_self(
    dist: np.ndarray, idx: np.ndarray, rows: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """k of the k + 1 results of each query, without the query itself (base row `rows[i]`)."""
    keep = _not_self(idx, rows)
    return dist[keep].reshape(len(rows), k), idx[keep].reshape(len(rows), k)


def drop_self_ids(idx: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """`_drop_self`'s indices alone: k of each query's k + 1 neighbours, the query left out."""
    return idx[_not_self(idx, rows)].reshape(len(rows), idx.shape[1] - 1)


def knn(embeddings: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k nearest neighbours (squared L2) of every row among the other rows.

    The query itself is excluded by index, not by distance, so exact duplicates of a query
    still count as neighbours. Returns (distances, indices), each of shape (N, k).
    """
    x = _as_float32(embeddings)
    k = min(k, len(x) - 1)
    return _drop_self(*search(x, x, k + 1), np.arange(len(x)), k)


def default_nlist(n: int) -> int:
    """About 4 sqrt(N) inverted lists, at most one per MIN_POINTS_PER_LIST points."""
    return max(1, min(round(4 * math.sqrt(n)), n // MIN_POINTS_PER_LIST))


def _ivf_search(
    x: np.ndarray, nlist: int, nprobe: int, k: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """The k nearest rows of x for every row, from an IVF-Flat index of x trained on a seeded
    sample of at most 256 points per list, probing `nprobe` lists."""
    index = faiss.IndexIVFFlat(faiss.IndexFlatL2(x.shape[1]), x.shape[1], nlist)
    gpu = _gpu_for(k)
    if gpu:
        index = _to_gpu(index)
        nprobe = min(nprobe, GPU_MAX_K)
    rng = np.random.default_rng(seed)
    sample = min(len(x), MAX_POINTS_PER_LIST * nlist)
    with cpu_threads(gpu):
        index.train(x[np.sort(rng.choice(len(x), sample, replace=False))])
        index.add(x)
        space = faiss.GpuParameterSpace() if gpu else faiss.ParameterSpace()
        space.set_index_parameter(index, "nprobe", min(nprobe, nlist))
        return index.search(x, k)


def ivf_knn(
    embeddings: np.ndarray, k: int, nlist: int | None = None, nprobe: int = 16, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """`knn` through an IVF-Flat index probing `nprobe` of its `nlist` lists (default:
    `default_nlist`): approximate unless nprobe >= nlist. Same self-exclusion, same shapes."""
    x = _as_float32(embeddings)
    n = len(x)
    k = min(k, n - 1)
    nlist = default_nlist(n) if nlist is None else nlist
    if not 1 <= nlist <= n or nprobe < 1:
        raise ValueError(f"IVF search needs 1 <= nlist <= {n}, nprobe >= 1; got {nlist}, {nprobe}")
    dist, idx = _ivf_search(x, nlist, nprobe, k + 1, seed)
    # A query whose probed lists hold fewer than k + 1 points is padded with -1: search it exactly.
    short = (idx < 0).any(axis=1)
    if short.any():
        dist[short], idx[short] = search(x, x[short], k + 1)
    return _drop_self(dist, idx, np.arange(n), k)


def recall_at_k(found: np.ndarray, exact: np.ndarray) -> float:
    """Mean share of each row of `exact` (N, k) that the same row of `found` (N, k) holds."""
    # Ids offset by row * (largest id + 1) are unique across rows: one isin checks every row.
    offset = np.arange(len(exact))[:, None] * (int(max(found.max(), exact.max())) + 1)
    return float(np.isin(found + offset, exact + offset).mean())


def knn_recall(
    embeddings: np.ndarray, indices: np.ndarray, sample: int = 1000, seed: int = 0
) -> float:
    """Mean recall@k of neighbour lists (N, k) of the rows of `embeddings` (self excluded)
    against exact search, over a seeded random sample of rows (nan for an empty sample)."""
    x = _as_float32(embeddings)
    n, k = indices.shape
    rows = np.sort(np.random.default_rng(seed).choice(n, min(sample, n), replace=False))
    if not len(rows):
        return float("nan")
    _, exact = _drop_self(*search(x, x[rows], k + 1), rows, k)
    return recall_at_k(indices[rows], exact)


def approximate_knn(
    embeddings: np.ndarray,
    k: int,
    nlist: int | None = None,
    nprobe: int = 16,
    recall_sample: int = 1000,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, float]:
    """`ivf_knn`'s (distances, indices) and their recall@k against exact search, measured on
    `recall_sample` random rows (each searched exactly against all rows)."""
    dist, idx = ivf_knn(embeddings, k, nlist, nprobe, seed)
    return dist, idx, knn_recall(embeddings, idx, recall_sample, seed)


def kmeans_assign(x: np.ndarray, n_clusters: int, **options) -> np.ndarray:
    """The cluster of each row after faiss k-means; `options` are faiss.Kmeans's (niter, nredo,
    seed, ...), and it runs on the GPU when `uses_gpu`."""
    x = _as_float32(x)
    options = {"verbose": False, **options}
    gpu = uses_gpu()
    if gpu:
        options["gpu"] = True
    kmeans = faiss.Kmeans(x.shape[1], n_clusters, **options)
    with cpu_threads(gpu):
        kmeans.train(x)
        _, assignment = kmeans.index.search(x, 1)
    return assignment[:, 0]
