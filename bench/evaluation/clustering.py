"""Clustering quality: NMI of k-means clusters with the labels: faiss's on the CPU, the same
algorithm in torch on a search device (`bench.util.torch_kmeans`)."""

from __future__ import annotations

import numpy as np
from sklearn.metrics import normalized_mutual_info_score

from bench.util.knn import kmeans_assign
from bench.util.progress import log
from bench.util.torch_kmeans import torch_kmeans_assign

PML_ITERATIONS, BEST_ITERATIONS = 20, 50
# Multiply-adds of a k-means (points x clusters x dims x iterations) from which it is said
# before it starts: about 3 s on a 2-core CPU.
SAID_FROM = 1e11
# What the default clustering (`full`) may spend on its k-means: about three minutes, at the
# rates measured (docs/metrics.md: SOP's test shape, PML's 1.75e12 multiply-adds in 74 s on one
# CPU thread; docs/speed.md: 60,000 x 128 into 7,746 clusters, 20 iterations, in 0.235 s in
# torch on an H100). Beyond it the restarts, then PML's k-means too, are left out and said:
# at 20,000 test classes the default ran past 10 minutes, with no way out but none.
KMEANS_SECONDS = 180
KMEANS_RATES = {"cpu": 2.4e10, "device": 5e12}  # multiply-adds a second
NMI_LEFT_OUT = "nmi_left_out"  # metrics.json: what the default's size cut left out, and why


def nmi(embeddings: np.ndarray, labels: np.ndarray, device=None) -> float:
    """NMI of one k-means run (as many clusters as classes) with the labels, exactly as PML's
    AccuracyCalculator computes it: faiss's Kmeans with 20 iterations and its other defaults
    (min_points_per_centroid only silences a warning; the result is unchanged). `device`: as
    `kmeans_nmi`'s."""
    return kmeans_nmi(embeddings, labels, device, niter=PML_ITERATIONS, min_points_per_centroid=1)


def nmi_best_of(
    embeddings: np.ndarray, labels: np.ndarray, seed: int = 0, nredo: int = 5, device=None
) -> float:
    """NMI of the best of `nredo` k-means restarts (lowest objective, 50 iterations, every
    point used): what earlier versions called NMI (within 0.013 of `nmi`, either side, on
    the committed glyphs runs)."""
    return kmeans_nmi(
        embeddings,
        labels,
        device,
        niter=BEST_ITERATIONS,
        nredo=nredo,
        seed=seed,
        min_points_per_centroid=1,
        max_points_per_centroid=1_000_000,  # no warning, no sampling
    )


def kmeans_nmi(embeddings: np.ndarray, labels: np.ndarray, device=None, **kmeans_options) -> float:
    """NMI of k-means clusters (as many as classes) with the labels: faiss's (device None), or
    torch's on `device` (a run's search device: `bench.util.torch_knn.search_device`)."""
    k = len(np.unique(labels))
    if device is None:
        assignment = kmeans_assign(embeddings, k, **kmeans_options)
    else:
        assignment = torch_kmeans_assign(embeddings, k, device, **kmeans_options)
    return float(normalized_mutual_info_score(labels, assignment))


def announce_kmeans(embeddings: np.ndarray, labels: np.ndarray, restarts: int) -> bool:
    """Say what a long NMI costs and how to skip it, before it starts (a cluster per class: at
    tens of thousands of classes it took minutes without a word); whether it was said. Its
    cost: multiply-adds of points x clusters x dims x iterations."""
    (n, dims), clusters = embeddings.shape, len(np.unique(labels))
    iterations = PML_ITERATIONS + restarts * BEST_ITERATIONS
    if float(n) * clusters * dims * iterations < SAID_FROM:
        return False
    then = f", then the best of {restarts} restarts of {BEST_ITERATIONS}" if restarts else ""
    skip = "--clustering pml keeps PML's alone, none" if restarts else "--clustering none"
    log.info(
        f"NMI: k-means of {n:,} embeddings into {clusters:,} clusters, {PML_ITERATIONS} "
        f"iterations (PML's){then}; {skip} skips {'k-means' if restarts else 'it'}"
    )
    return True


def kmeans_budget(device=None) -> float:
    """The multiply-adds the default's k-means may take where the search runs (None or a
    CPU device: faiss or torch on the CPU)."""
    on_cpu = device is None or getattr(device, "type", "cpu") == "cpu"
    return KMEANS_SECONDS * KMEANS_RATES["cpu" if on_cpu else "device"]


def fitted_clustering(
    kind: str, embeddings: np.ndarray, labels: np.ndarray, restarts: int, device=None
) -> tuple[str, str]:
    """The NMI a test computes (`kind`, a run's --clustering) at this size: `full`, the
    default, keeps what fits `kmeans_budget` (both NMIs, PML's alone, or none); `pml` and
    `none`, chosen, are kept at any size. With it, a line saying what was left out ('' where
    nothing was)."""
    if kind != "full":
        return kind, ""
    (n, dims), clusters = embeddings.shape, len(np.unique(labels))
    per_iteration, budget = float(n) * clusters * dims, kmeans_budget(device)
    full = per_iteration * (PML_ITERATIONS + restarts * BEST_ITERATIONS)
    if full <= budget:
        return "full", ""
    if per_iteration * PML_ITERATIONS <= budget:
        fitted, left = "pml", f"the best of {restarts} k-means restarts (nmi_best_of_{restarts})"
    else:
        fitted, left = "none", "NMI (its k-means)"
    return fitted, (
        f"{left} left out: k-means of {n:,} embeddings into {clusters:,} clusters costs "
        f"{full:.1e} multiply-adds, beyond the default's {budget:.1e} (about "
        f"{KMEANS_SECONDS // 60} minutes here); --clustering pml computes PML's NMI at any "
        "size, --clustering none says no k-means is wanted"
    )
