"""k-means in plain torch on any device: NMI's clustering on a GPU where faiss has none (issue 44).

The algorithm is faiss's `Clustering`, step for step: at most `max_points_per_centroid` points a
cluster sampled for training; centroids started at distinct random points; Lloyd iterations
(assign each point to its nearest centroid by squared L2, then each centroid the mean of its
points); an emptied cluster re-seeded by splitting a populous one (a copy of its centroid, both
moved apart by 1/1024, the one split drawn with probability (size - 1) / (n - k)); the best of
`nredo` starts by their last objective; then every point assigned to its nearest centroid. Only
the random draws differ (numpy's, not faiss's), so its clusters are another seed's: its NMI
agrees with faiss's within their spread over seeds, not to the bit. Sums are taken in float64."""

from __future__ import annotations

import numpy as np
import torch

from bench.util.arrays import chunks
from bench.util.torch_knn import CELLS, TorchSearch

EPS = 1 / 1024  # faiss's perturbation of a split centroid
REDO_STEP = 15486557  # faiss's seed offset between starts


def nearest_centroid(
    x: torch.Tensor, centroids: torch.Tensor, cells: int = CELLS
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's squared distance to its nearest centroid and that centroid's index (the
    lowest of tied ones), at most `cells` distances at a time."""
    search = TorchSearch(centroids, x.device)
    found = [search.distances(x[rows]).min(1) for rows in chunks(len(x), len(centroids), cells)]
    return torch.cat([f.values for f in found]), torch.cat([f.indices for f in found])


def centroid_means(
    x: torch.Tensor, assignment: torch.Tensor, k: int
) -> tuple[torch.Tensor, np.ndarray]:
    """Each cluster's mean (0 where it is empty) and its size, on the host."""
    sums = torch.zeros((k, x.shape[1]), dtype=torch.float64, device=x.device)
    sums.index_add_(0, assignment, x.double())
    sizes = torch.bincount(assignment, minlength=k)
    means = sums / sizes.clamp_min(1)[:, None]
    return means.float(), sizes.cpu().numpy()


def split_empty(centroids: torch.Tensor, sizes: np.ndarray, rng: np.random.Generator) -> int:
    """faiss's `split_clusters`: each empty cluster takes a copy of a populous one's centroid,
    drawn cycling from cluster 0, each with probability (size - 1) / (n - k), and the two are
    moved apart by EPS, in opposite directions on alternate dimensions; the sizes are shared
    as if the cluster split evenly. The number of clusters split."""
    k, empty = len(sizes), np.flatnonzero(sizes == 0)
    n = int(sizes.sum())
    sign = torch.ones(centroids.shape[1], device=centroids.device)
    sign[1::2] = -1
    for ci in empty:
        chance = (sizes - 1.0) / (n - k)
        hits = np.flatnonzero(rng.random(k) < chance)
        while not len(hits):
            hits = np.flatnonzero(rng.random(k) < chance)
        cj = hits[0]
        centroids[ci] = centroids[cj] * (1 + EPS * sign)
        centroids[cj] *= 1 - EPS * sign
        sizes[ci] = sizes[cj] // 2
        sizes[cj] -= sizes[ci]
    return len(empty)


def lloyd(x: torch.Tensor, centroids: torch.Tensor, niter: int, rng: np.random.Generator):
    """`niter` Lloyd iterations from `centroids`: (centroids, objective of the last
    assignment, as faiss reports it)."""
    objective = float("inf")
    for _ in range(niter):
        dist, assignment = nearest_centroid(x, centroids)
        objective = float(dist.double().sum())
        centroids, sizes = centroid_means(x, assignment, len(centroids))
        if (sizes == 0).any():
            split_empty(centroids, sizes, rng)
    return centroids, objective


def torch_kmeans_assign(
    x: np.ndarray | torch.Tensor,
    n_clusters: int,
    device: str | torch.device,
    niter: int = 25,
    nredo: int = 1,
    seed: int = 1234,
    max_points_per_centroid: int = 256,
    min_points_per_centroid: int = 39,
    verbose: bool = False,
) -> np.ndarray:
    """`bench.util.knn.kmeans_assign` on `device`: the cluster of each row, with faiss.Kmeans's
    defaults and options; `min_points_per_centroid` and `verbose` only silence faiss's warnings
    and are taken for that, and any other of faiss's options (spherical, ...) is an error here
    rather than silently ignored."""
    if not isinstance(x, torch.Tensor):
        x = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    x = x.detach().float().to(device)
    if len(x) < n_clusters:
        raise ValueError(f"k-means of {len(x)} points into {n_clusters} clusters: too few points")
    train = x
    if len(x) > n_clusters * max_points_per_centroid:
        keep = np.random.default_rng(seed).permutation(len(x))[
            : n_clusters * max_points_per_centroid
        ]
        train = x[torch.from_numpy(keep).to(x.device)]
    best, best_objective = None, float("inf")
    with torch.no_grad():
        for redo in range(nredo):
            rng = np.random.default_rng(seed + 1 + redo * REDO_STEP)
            start = torch.from_numpy(rng.permutation(len(train))[:n_clusters]).to(x.device)
            centroids, objective = lloyd(train, train[start].clone(), niter, rng)
            if best is None or objective < best_objective:
                best, best_objective = centroids, objective
        return nearest_centroid(x, best)[1].cpu().numpy()
