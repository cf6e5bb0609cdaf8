"""The evaluator's search on a device against a bare exact search in torch written as a user
would write it (issue 44's reference, computed here in the same run): seconds of each, their
ratio, and both R@1 and MAP@R, which must agree."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from bench.speed.scale import ours as harness  # the evaluator, as the scale rows run it
from bench.speed.scale import skewed_set
from bench.util.runtime import synchronize
from bench.util.torch_knn import CELLS, GPU_CELLS, TorchSearch, squared_norms

DIMS = 128
RAW_DIMS = 3 * 32 * 32  # device-health: the raw inputs' baseline's (bench.data.images.RAW_SIDE)
WARM_ITEMS = 2000  # a warm-up's items before the timed sizes
BARE_CELLS = 2**26  # distances a chunk of the bare search holds
WIDER = GPU_CELLS // CELLS  # search-parts: a GPU's chunk's queries, in times the CPU's (8)
LARGE_CLASS = 0.1  # search-parts: the share of the items in the large class, as skewed_set
SEGMENT = 1024  # search-parts: columns of a segment of two_stage_topk's first stage


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


def warm_size(sizes: list[int], most: int = WARM_ITEMS) -> int:
    """Items of a warm-up before timing `sizes`: `most`, or the smallest size if less (a
    k-means of 2,000 items took seconds of a test's benchmark of 300)."""
    return min([most, *sizes])


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
    warm, warm_labels = skewed_set(warm_size(sizes), DIMS)
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

    rows = []
    for labels, faiss_s, faiss_nmi, ours_s, ours_nmi in cpu_and_device(nmi, sizes, DIMS, device):
        rows.append(
            {
                "items": len(labels),
                "clusters": len(np.unique(labels)),
                "faiss (CPU)_s": faiss_s,
                f"torch ({device})_s": ours_s,
                "faiss / torch": faiss_s / ours_s,
                "NMI faiss": faiss_nmi,
                "NMI torch": ours_nmi,
            }
        )
    return rows


def cpu_and_device(
    fn: Callable, sizes: list[int], dims: int, device: str, warm: int = WARM_ITEMS
) -> Iterator[tuple[np.ndarray, float, Any, float, Any]]:
    """Per size, on `skewed_set(size, dims)`: (its labels, the seconds and result of `fn(x,
    labels)`, the CPU's path, then of `fn(x, labels, device=device)`), each timed once after a
    warm-up on the device."""
    on = torch.device(device)
    fn(*skewed_set(warm_size(sizes, warm), dims), device=on)
    for n in sizes:
        x, labels = skewed_set(n, dims)
        cpu_s, cpu = timed(lambda *a, device: fn(*a), x, labels, device=on)
        ours_s, ours = timed(fn, x, labels, device=on)
        yield labels, cpu_s, cpu, ours_s, ours


def device_health_benchmark(sizes: list[int], device: str) -> list[dict]:
    """Per size (3,072-d: the raw inputs' baseline of 32 x 32 colour images; one class of
    10 %): the embedding's health as a run on the CPU computes it (numpy and faiss) against
    torch's on `device` (`bench.evaluation.health`), each timed once after a warm-up,
    with the largest relative difference between their numbers."""
    from bench.evaluation.health import embedding_health

    rows = []
    measured = cpu_and_device(embedding_health, sizes, RAW_DIMS, device, warm=500)
    for labels, cpu_s, cpu, ours_s, ours in measured:
        rows.append(
            {
                "items": len(labels),
                "dims": RAW_DIMS,
                "CPU_s": cpu_s,
                f"torch ({device})_s": ours_s,
                "CPU / torch": cpu_s / ours_s,
                "largest relative difference": largest_difference(cpu, ours),
            }
        )
    return rows


def largest_difference(expected: dict[str, float], found: dict[str, float]) -> float:
    """The largest |found - expected| / |expected| over the keys where both are numbers."""
    gaps = [
        abs(found[k] - v) / max(abs(v), 1e-300)
        for k, v in expected.items()
        if np.isfinite(v) and np.isfinite(found[k])
    ]
    return max(gaps, default=0.0)


def search_parts_benchmark(
    sizes: list[int], device: str, repeats: int = 3, cells: int = CELLS
) -> list[dict]:
    """Where the evaluator's search spends a chunk's time on `device` (for the search at
    1,000,000 that missed its 40 s on an H100): per size, one chunk of `cells` distances (the
    CPU's chunk, and a GPU's before it held WIDER times as many), each part timed alone (best
    of `repeats`): the distances, top-k for a small class and for the class of 10 %, the
    (distance, index) ordering of the latter, and its R-Precision and AP@R; with the chunks a
    search of that size makes, and the seconds they take. Beside them, the same parts for a
    chunk of WIDER times the queries (a GPU's chunk since the H100 showed it faster: its
    top-k works a row per block), and candidates for a faster search, not the harness's:
    top-k of a small class in two stages (`two_stage_topk`), and a whole sort of each row;
    and the distances as one addmm, as the search made them before one product."""
    on, rows = torch.device(device), []
    for n in sizes:
        for chunk, candidates in ((cells, False), (cells * WIDER, True)):
            queries, parts = chunk_parts(n, on, chunk, candidates)
            rows += [part_row(n, queries, *part, on, repeats) for part in parts]
    return rows


def part_row(n: int, queries: int, part: str, share: float, fn: Callable, on, repeats: int) -> dict:
    """A part's time a chunk, and in a search, where it runs on the chunks of `share` of the
    queries (the small classes' 90 %, the large class's 10 %, or all)."""
    seconds = min(timed(lambda device, call=fn: call(), device=on)[0] for _ in range(repeats))
    chunks = -(-round(share * n) // queries)
    return {
        "items": n,
        "queries a chunk": queries,
        "part": part,
        "ms a chunk": 1000 * seconds,
        "chunks a search": chunks,
        "s a search": seconds * chunks,
    }


def chunk_parts(
    n: int, on: torch.device, cells: int = CELLS, candidates: bool = False
) -> tuple[int, list[tuple[str, float, Callable]]]:
    """The queries in one chunk of `cells` distances of a search among n random 128-d items,
    and (name, the share of the queries it runs for, the part as a call) of each part of its
    search; with `candidates`, those of a faster search's candidates as well."""
    from bench.evaluation.retrieval import ap_at_r, r_precision
    from bench.util.arrays import chunk_rows
    from bench.util.torch_knn import in_index_order

    gen = torch.Generator(on).manual_seed(0)
    search = TorchSearch(torch.randn(n, DIMS, device=on, generator=gen), on)
    q = search.base[: chunk_rows(n, cells)]
    big = max(1, round(n * LARGE_CLASS))
    dist = search.shifted(q)  # as the search ranks them: less each query's |q|^2
    top = torch.topk(dist, big, dim=1, largest=False)
    same = torch.rand(top.indices.shape, device=on, generator=gen) < 0.1
    r = torch.full((len(q),), big, device=on)
    small, large = 1 - LARGE_CLASS, LARGE_CLASS  # the queries each part runs for
    parts = [
        ("distances", 1.0, lambda: search.shifted(q)),
        ("top-k, k 12", small, lambda: torch.topk(dist, 12, dim=1, largest=False, sorted=False)),
        (f"top-k, k {big}", large, lambda: torch.topk(dist, big, 1, largest=False, sorted=False)),
        (f"ordering {big}", large, lambda: in_index_order(top.values, top.indices)),
        (f"scores of {big}", large, lambda: (r_precision(same, r), ap_at_r(same, r, big))),
    ]
    if candidates:
        parts += [
            ("top-k, k 12, in two stages", small, lambda: two_stage_topk(dist, 12)),
            ("sorting whole rows", large, lambda: torch.sort(dist, dim=1)),
            ("distances, one addmm (before)", 1.0, lambda: addmm_distances(search, q)),
        ]
    return len(q), parts


def addmm_distances(search: TorchSearch, queries: torch.Tensor) -> torch.Tensor:
    """A chunk's distances as the search made them until one product replaced them: |q|^2 +
    |y|^2 - 2 q.y in one addmm (its |q|^2 + |y|^2 a whole chunk), then clamped at 0."""
    sums = search.norms[None, :] + squared_norms(queries)
    dist = torch.addmm(sums, queries, search.base.T, alpha=-2.0)
    return dist.clamp_min_(0)


def two_stage_topk(
    dist: torch.Tensor, k: int, segment: int = SEGMENT
) -> tuple[torch.Tensor, torch.Tensor]:
    """The k smallest of each row, unsorted, as (values, column indices): the k smallest of
    each segment of `segment` columns first, then the k smallest of those and of the columns
    left over; the same values as `torch.topk`, and the same columns but among equal values.
    A GPU's top-k works each row in one block: a chunk of few, long rows leaves most of it
    idle, and segments make many short rows of them."""
    n, m = dist.shape
    whole = m // segment * segment
    if k > segment or whole == 0:
        return torch.topk(dist, min(k, m), dim=1, largest=False, sorted=False)
    values, idx = torch.topk(
        dist[:, :whole].view(n, -1, segment), k, dim=2, largest=False, sorted=False
    )
    starts = torch.arange(0, whole, segment, device=dist.device)
    idx = (idx + starts[None, :, None]).view(n, -1)
    rest = torch.arange(whole, m, device=dist.device).expand(n, -1)
    values, idx = torch.cat([values.view(n, -1), dist[:, whole:]], 1), torch.cat([idx, rest], 1)
    best, pick = torch.topk(values, min(k, m), dim=1, largest=False, sorted=False)
    return best, idx.gather(1, pick)


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
    "device-health": (
        "the embedding's health: numpy and faiss on the CPU vs torch on %s (3,072-d, one class "
        "of 10 %%, --scale-sizes)",
        device_health_benchmark,
    ),
    "search-parts": (
        "the evaluator's search on %s, a chunk's parts (ms; 128-d, --scale-sizes)",
        search_parts_benchmark,
    ),
}
