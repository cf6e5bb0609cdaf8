"""The evaluator's search on a device against a bare exact search in torch written as a user
would write it (issue 44's reference, computed here in the same run): seconds of each, their
ratio, and both R@1 and MAP@R, which must agree."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

from bench.speed.scale import skewed_set
from bench.util.runtime import synchronize

DIMS = 128
BARE_CELLS = 2**26  # distances a chunk of the bare search holds


def bare_torch(x: np.ndarray, labels: np.ndarray, device: torch.device) -> dict[str, float]:
    """R@1 and MAP@R from the plainest exact search: chunks of queries in their given order,
    |q|^2 + |y|^2 - 2 q.y, the query left out by index, topk for the chunk's largest R."""
    xs = torch.from_numpy(x).to(device)
    codes = torch.from_numpy(np.unique(labels, return_inverse=True)[1]).to(device)
    r = torch.bincount(codes)[codes] - 1
    norms = (xs * xs).sum(1)
    rows = max(1, BARE_CELLS // len(xs))
    hits, ap_sum = 0.0, 0.0
    for start in range(0, len(xs), rows):
        q, rq = xs[start : start + rows], r[start : start + rows]
        dist = norms[None, :] + (q * q).sum(1, keepdim=True) - 2 * q @ xs.T
        dist[torch.arange(len(q)), torch.arange(start, start + len(q))] = float("inf")
        k = max(int(rq.max()), 1)
        idx = dist.topk(k, dim=1, largest=False).indices
        same = (codes[idx] == codes[start : start + len(q), None]).double()
        hits += float(same[:, 0].sum())
        ranks = torch.arange(1, k + 1, device=device, dtype=torch.float64)
        same *= ranks[None, :] <= rq[:, None]
        ap = (same.cumsum(1) / ranks * same).sum(1) / rq.clamp_min(1)
        ap_sum += float(ap[rq > 0].sum())
    return {"R@1": hits / len(xs), "MAP@R": ap_sum / float((r > 0).sum())}


def harness(x: np.ndarray, labels: np.ndarray, device: torch.device) -> dict[str, float]:
    from bench.evaluation.retrieval import query_scores

    scores = query_scores(x, labels, device=device)
    return {"R@1": float(scores["recall@1"].mean()), "MAP@R": float(np.nanmean(scores["map@r"]))}


def timed(fn, *args, device: torch.device) -> tuple[float, dict]:
    synchronize(device)
    start = time.perf_counter()
    found = fn(*args, device=device)
    synchronize(device)
    return time.perf_counter() - start, found


def device_search_benchmark(sizes: list[int], device: str) -> list[dict]:
    """Per size (128-d, one class of 10 %): the harness's device search and the bare one, each
    timed once after a warm-up on a small set."""
    on = torch.device(device)
    warm, warm_labels = skewed_set(2000, DIMS)
    for fn in (harness, bare_torch):
        fn(warm, warm_labels, on)
    rows = []
    for n in sizes:
        x, labels = skewed_set(n, DIMS)
        ours_s, ours = timed(harness, x, labels, device=on)
        bare_s, bare = timed(bare_torch, x, labels, device=on)
        rows.append(
            {
                "items": n,
                "harness_s": ours_s,
                "bare_torch_s": bare_s,
                "harness / bare": ours_s / bare_s,
                "R@1 harness": ours["R@1"],
                "R@1 bare": bare["R@1"],
                "MAP@R harness": ours["MAP@R"],
                "MAP@R bare": bare["MAP@R"],
            }
        )
    return rows


def device_kmeans_benchmark(sizes: list[int], device: str) -> list[dict]:
    """Per size (128-d, one class of 10 %, the rest in classes of 2 to 12): NMI's k-means as a
    run's test computes it (PML's 20 iterations, a cluster per class), faiss's on the CPU
    against torch's on `device` (`bench.util.torch_kmeans`), each timed once after a warm-up,
    with both NMIs (another seed's clusters: they agree within k-means' spread, not exactly)."""
    from bench.evaluation.clustering import nmi

    on = torch.device(device)
    warm, warm_labels = skewed_set(2000, DIMS)
    nmi(warm, warm_labels, on)
    rows = []
    for n in sizes:
        x, labels = skewed_set(n, DIMS)
        faiss_s, faiss_nmi = timed(lambda *a, device: nmi(*a), x, labels, device=on)
        ours_s, ours_nmi = timed(nmi, x, labels, device=on)
        rows.append(
            {
                "items": n,
                "clusters": len(np.unique(labels)),
                "faiss (CPU)_s": faiss_s,
                f"torch ({device})_s": ours_s,
                "faiss / torch": faiss_s / ours_s,
                "NMI faiss": faiss_nmi,
                "NMI torch": ours_nmi,
            }
        )
    return rows


def search_parts_benchmark(sizes: list[int], device: str, repeats: int = 3) -> list[dict]:
    """Where the evaluator's search spends a chunk's time on `device` (for the search at
    1,000,000 that missed its 40 s on an H100): per size, one chunk of queries as the harness
    makes it (`chunk_rows`), each part timed alone (best of `repeats`): the distances, top-k
    for a small class and for the class of 10 %, the (distance, index) ordering of the latter,
    and its R-Precision and AP@R; with the chunks a search of that size makes."""
    on, rows = torch.device(device), []
    for n in sizes:
        queries, parts = chunk_parts(n, on)
        for part, fn in parts:
            seconds = min(
                timed(lambda device, call=fn: call(), device=on)[0] for _ in range(repeats)
            )
            rows.append(
                {
                    "items": n,
                    "part": part,
                    "ms a chunk": 1000 * seconds,
                    "queries a chunk": queries,
                    "chunks a search": -(-n // queries),
                }
            )
    return rows


def chunk_parts(n: int, on: torch.device) -> tuple[int, list[tuple[str, Callable]]]:
    """The queries in one chunk of a search among n random 128-d items, and (name, the part as
    a call) of each part of its search."""
    from bench.evaluation.device_retrieval import precision_and_ap
    from bench.util.torch_knn import TorchSearch, chunk_rows, in_index_order

    gen = torch.Generator(on).manual_seed(0)
    search = TorchSearch(torch.randn(n, DIMS, device=on, generator=gen), on)
    q = search.base[: chunk_rows(n)]
    big = max(1, n // 10)
    dist = search.distances(q)
    top = torch.topk(dist, big, dim=1, largest=False)
    same = torch.rand(top.indices.shape, device=on, generator=gen) < 0.1
    r = torch.full((len(q),), big, device=on)
    return len(q), [
        ("distances", lambda: search.distances(q)),
        ("top-k, k 12", lambda: torch.topk(dist, 12, dim=1, largest=False, sorted=False)),
        (f"top-k, k {big}", lambda: torch.topk(dist, big, dim=1, largest=False, sorted=False)),
        (f"ordering {big}", lambda: in_index_order(top.values, top.indices)),
        (f"scores of {big}", lambda: precision_and_ap(same, r)),
    ]


# `speed --only NAME`: (the table's title, with the device for %s; the benchmark of
# --scale-sizes on the device)
BENCHMARKS = {
    "device-search": (
        "evaluator's search in torch on %s vs a bare torch search (R@K and MAP@R, 128-d, one "
        "class of 10 %%, --scale-sizes)",
        device_search_benchmark,
    ),
    "device-kmeans": (
        "NMI's k-means (PML's 20 iterations, a cluster per class): faiss on the CPU vs torch on "
        "%s (128-d, one class of 10 %%, --scale-sizes)",
        device_kmeans_benchmark,
    ),
    "search-parts": (
        "the evaluator's search on %s, a chunk's parts (ms; 128-d, --scale-sizes)",
        search_parts_benchmark,
    ),
}
