"""Embedding health: how much of its size an embedding uses, and how far apart its classes lie.

`embedding_health` returns flat numbers for metrics.json, every key prefixed `health_`:

- `health_pca_dims`: the embedding size; `health_pca_components_90` / `_99`: how many
  principal components of the centred embeddings hold 90 % / 99 % of the variance (0 when there
  is no variance at all); `health_pca_first_share`: the first component's share. Few components
  or a large first share: a collapsed or under-used embedding.
- `health_intra_class_distance_mean`: the mean Euclidean distance over all pairs of distinct
  points of the same class; `health_inter_class_distance_mean`: over all pairs of points of
  different classes; `health_intra_inter_ratio`: the first over the second (small: tight,
  separated classes); `health_inter_class_centroid_distance_min`: the distance between the
  closest two class means.

Pair means are exact where there are at most 2 x `MAX_PAIRS` pairs in all (about 630 points);
above, each is the mean of `MAX_PAIRS` pairs of its kind drawn uniformly at random (seeded,
with replacement), whose relative standard error is the distances' coefficient of variation
/ sqrt(MAX_PAIRS): about 0.1 % where distances vary by 30 %. Cost on 2 busy cores: 0.2 s for
10,000 x 64, 0.6 s for 50,000 x 128 (the covariance and 200,000 distances); the eigenvalues of
a 4,096 x 4,096 covariance take most of 30-50 s for 6,000 x 4,096. Memory: no float64 copy
of the embedding (the sums are taken a chunk of rows at a time), the class means, and
faiss's copy of them: 150,000 x 1,024 float32 in 50,000 classes peaked 1.27 GB above its 0.63
GB of data, 2.85 GB before.

A number that is undefined (no same-class pair, a single class, no variance) is NaN, which
Python's json writes and reads back as NaN.

The costly parts (the covariance's eigenvalues, the pair distances, the class means and their
nearest pair) are written once over numpy arrays or torch tensors (`bench.util.arrays.
namespace`): on the CPU in numpy and faiss, to the bit as before; on a run's device in torch
(issue 44: on a GPU the raw inputs' baseline at 3,072 dimensions spent seconds of the run's
start on the CPU), agreeing with the CPU's to float64 rounding.
"""

from __future__ import annotations

import numpy as np
import torch

from bench.util.arrays import (
    CHUNK_VALUES,
    Array,
    add_rows,
    chunks,
    host,
    like,
    namespace,
    row_chunks,
)
from bench.util.torch_knn import nearest_others

HEALTH_KEYS = tuple(
    f"health_{k}"
    for k in (
        "pca_dims",
        "pca_components_90",
        "pca_components_99",
        "pca_first_share",
        "intra_class_distance_mean",
        "inter_class_distance_mean",
        "intra_inter_ratio",
        "inter_class_centroid_distance_min",
    )
)
MAX_PAIRS = 100_000
# Pair differences a chunk on the CPU (512 KiB): held in a core's cache, 3x faster than
# CHUNK_VALUES at 1,024 dims (200,000 pairs: 0.34 s against 1.1 s on one CPU thread), the same
# distances. A device takes CHUNK_VALUES: fewer, larger steps.
PAIR_CHUNK_VALUES = 1 << 16
THRESHOLDS = (0.90, 0.99)


def variance_spectrum(x: Array) -> np.ndarray:
    """The variances along the principal axes of the rows of `x` (an array or a tensor),
    largest first, from the eigenvalues of the smaller of its covariance and Gram matrices (a
    full SVD of 50,000 x 128 takes seconds; this, a fraction of one). The covariance is summed
    in float64 a chunk of rows at a time, so that no float64 copy of a large `x` is held."""
    xp, f64 = namespace(x), namespace(x).float64
    mean = xp.mean(x, axis=0, dtype=f64)
    if len(x) >= x.shape[1]:
        gram = xp.zeros((x.shape[1], x.shape[1]), dtype=f64, device=x.device)
        for rows in row_chunks(x):
            centred = xp.asarray(x[rows], dtype=f64) - mean
            gram += centred.T @ centred
    else:  # fewer rows than dimensions: a small x
        centred = xp.asarray(x, dtype=f64) - mean
        gram = centred @ centred.T
    values = xp.flip(xp.clip(xp.linalg.eigvalsh(gram), 0.0, None), (0,))
    return host(values) / max(len(x) - 1, 1)


def components_holding(spectrum: np.ndarray, share: float) -> int:
    """The fewest leading components whose variance is at least `share` of the total; 0 where
    the total is 0."""
    total = spectrum.sum()
    if total <= 0:
        return 0
    cumulative = np.cumsum(spectrum) / total
    # The tolerance keeps an exact tie (9 of 10 equal axes for 90 %) from rounding up.
    return min(int(np.searchsorted(cumulative, share - 1e-9)) + 1, len(spectrum))


def pca_health(x: np.ndarray, spectrum: np.ndarray) -> dict[str, float]:
    """The pca_ numbers of `x`, whose `variance_spectrum` is `spectrum`."""
    # Variance at rounding level of the values' own size is none: a constant embedding.
    squares = sum(float(np.square(x[rows], dtype=np.float64).sum()) for rows in row_chunks(x))
    if spectrum.sum() <= 1e-12 * squares / max(x.size, 1):
        spectrum = np.zeros_like(spectrum)
    total = spectrum.sum()
    health = {"pca_dims": int(x.shape[1])}
    for t in THRESHOLDS:
        health[f"pca_components_{round(100 * t)}"] = components_holding(spectrum, t)
    health["pca_first_share"] = float(spectrum[0] / total) if total > 0 else float("nan")
    return health


def class_index(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(order, starts, counts): `order` sorts the points by class; class c's points are
    order[starts[c] : starts[c] + counts[c]]."""
    order = np.argsort(labels, kind="stable")
    _, starts, counts = np.unique(labels[order], return_index=True, return_counts=True)
    return order, starts, counts


def same_class_pairs(
    labels: np.ndarray, rng: np.random.Generator, size: int
) -> tuple[np.ndarray, np.ndarray]:
    """`size` pairs drawn uniformly from the pairs of distinct points of one class: a class
    in proportion to its pairs, then two distinct members of it."""
    order, starts, counts = class_index(labels)
    weights = counts * (counts - 1.0)
    if not weights.sum():
        return np.empty(0, dtype=int), np.empty(0, dtype=int)
    c = rng.choice(len(counts), size=size, p=weights / weights.sum())
    a = rng.integers(0, counts[c])
    b = rng.integers(0, counts[c] - 1)
    b += b >= a
    return order[starts[c] + a], order[starts[c] + b]


def different_class_pairs(
    labels: np.ndarray, rng: np.random.Generator, size: int
) -> tuple[np.ndarray, np.ndarray]:
    """`size` pairs drawn uniformly from the pairs of points of different classes: a class c in
    proportion to its members times the points outside it, then one of each."""
    order, starts, counts = class_index(labels)
    outside = len(labels) - counts
    weights = counts * outside.astype(float)
    if not weights.sum():
        return np.empty(0, dtype=int), np.empty(0, dtype=int)
    c = rng.choice(len(counts), size=size, p=weights / weights.sum())
    a = rng.integers(0, counts[c])
    b = rng.integers(0, outside[c])
    b += counts[c] * (b >= starts[c])  # skip over class c's block of `order`
    return order[starts[c] + a], order[b]


def pair_distances(x: Array, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Euclidean distances of rows i[p] and j[p] of `x` (an array or a tensor), a chunk of
    pairs at a time, summed in float64 (float32 rows are gathered as they are: a third of the
    time at 4,096 dims)."""
    xp, i, j = namespace(x), like(i, x), like(j, x)
    out = xp.empty(len(i), dtype=xp.float64, device=x.device)
    step = PAIR_CHUNK_VALUES if xp is np else CHUNK_VALUES
    for pairs in chunks(len(i), x.shape[1], step):
        d = xp.asarray(x[i[pairs]] - x[j[pairs]], dtype=xp.float64)
        out[pairs] = xp.sqrt(xp.einsum("pk,pk->p", d, d))
    return host(out)


def mean_or_nan(values: np.ndarray) -> float:
    return float(values.mean()) if len(values) else float("nan")


def pair_means(
    x: Array, labels: np.ndarray, seed: int, max_pairs: int = MAX_PAIRS
) -> tuple[float, float]:
    """(mean same-class distance, mean different-class distance) of the rows of `x` (an array
    or a tensor): over all pairs where there are at most 2 x `max_pairs`, else over
    `max_pairs` sampled pairs of each kind."""
    n = len(x)
    if n * (n - 1) // 2 <= 2 * max_pairs:
        i, j = np.triu_indices(n, 1)
        d, same = pair_distances(x, i, j), labels[i] == labels[j]
        return mean_or_nan(d[same]), mean_or_nan(d[~same])
    rng = np.random.default_rng(seed)
    intra = pair_distances(x, *same_class_pairs(labels, rng, max_pairs))
    inter = pair_distances(x, *different_class_pairs(labels, rng, max_pairs))
    return mean_or_nan(intra), mean_or_nan(inter)


def closest_centroids(x: Array, labels: np.ndarray, device: torch.device | None = None) -> float:
    """The distance between the two closest class means of the rows of `x` (an array, or a
    tensor on `device`); NaN for a single class."""
    classes, codes, counts = np.unique(labels, return_inverse=True, return_counts=True)
    if len(classes) < 2:
        return float("nan")
    xp, codes = namespace(x), like(codes, x)
    sums = xp.zeros((len(classes), x.shape[1]), dtype=xp.float64, device=x.device)
    for rows in row_chunks(x):  # no copy of x: a chunk of rows at a time
        add_rows(sums, codes[rows], xp.asarray(x[rows], dtype=xp.float64))
    centroids = host(sums) / counts[:, None]
    squared, idx = nearest_others(centroids, 1, device)
    # The search finds the pair in float32; its distance is measured again in float64.
    a = int(np.argmin(squared[:, 0]))
    return float(np.linalg.norm(centroids[a] - centroids[idx[a, 0]]))


def embedding_health(
    embeddings: np.ndarray,
    labels: np.ndarray,
    seed: int = 0,
    device: torch.device | None = None,
) -> dict[str, float]:
    """The `health_` numbers of one labelled embedding (see the module's docstring); all NaN
    but the size where an embedding holds a non-finite value. `device`: where torch computes
    the costly parts (a run's search device: `bench.util.torch_knn.search_device`); None:
    numpy and faiss on the CPU, as always."""
    raw, labels = np.asarray(embeddings), np.asarray(labels)
    # float32 stays float32 (each part sums in float64 a chunk at a time): a float64 copy of
    # 150,000 x 1,024 embeddings is 1.2 GB.
    x = raw if raw.dtype in (np.float32, np.float64) else raw.astype(np.float64)
    if x.ndim != 2 or not len(x) or len(labels) != len(x):
        raise ValueError(
            f"embedding_health needs N x D embeddings and N labels, got "
            f"{x.shape} and {labels.shape}"
        )
    if not np.isfinite(x).all():
        return {k: float("nan") for k in HEALTH_KEYS} | {"health_pca_dims": int(x.shape[1])}
    rows = x if device is None else torch.from_numpy(np.ascontiguousarray(x)).to(device)
    health = pca_health(x, variance_spectrum(rows))
    intra, inter = pair_means(rows, labels, seed)
    closest = closest_centroids(rows, labels, device)
    health["intra_class_distance_mean"] = intra
    health["inter_class_distance_mean"] = inter
    health["intra_inter_ratio"] = intra / inter if inter > 0 else float("nan")
    health["inter_class_centroid_distance_min"] = closest
    return {f"health_{k}": v for k, v in health.items()}
