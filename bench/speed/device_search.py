"""The evaluator's search on a device against a bare exact search in torch written as a user
would write it (issue 44's reference, computed here in the same run): seconds of each, their
ratio, and both R@1 and MAP@R, which must agree."""

from __future__ import annotations

import time

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
