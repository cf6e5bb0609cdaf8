"""The NNGK bank: its refresh against the inference pass that precedes it, and approximate (IVF)
against exact search of a large bank.

A run refreshes the bank by embedding the training set (eval mode) and then calling
`NNGKLoss.refresh` (the k nearest neighbours of every centre, then a same-class centre for the
lists that lack one). The first benchmark times the two parts on the glyphs preset's setting:
training glyphs at 28x28 through small_cnn, 64 dims, k = 100.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch.utils.data import Dataset

from bench.speed.benchmarks import seconds_per_call, timed

GLYPHS_PER_CLASS = 30  # as the default glyphs set
CLUSTER_SIZE = 100  # bank points per synthetic class: a class's points fill a list of k = 100
CLUSTER_SPREAD = 0.5  # within-class noise against centres of unit variance: separated classes
EXACT_ALL_UP_TO = 200_000  # larger banks: exact search timed on a sample of queries


class LabelledImages(Dataset):
    """Images with labels, as a split yields them to `embed`: (image, label, index)."""

    def __init__(self, images: torch.Tensor, labels: np.ndarray):
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int):
        return self.images[i], int(self.labels[i]), i


def glyph_images(count: int, size: int = 28) -> LabelledImages:
    """The first `count` glyphs of classes of 30 instances (generated, not cached)."""
    from bench.data.glyphs import GlyphSpec, generate

    classes = max(2, math.ceil(count / GLYPHS_PER_CLASS))
    raw, labels = generate(GlyphSpec(classes=classes, instances=GLYPHS_PER_CLASS, size=size))
    images = torch.from_numpy(raw[:count].astype(np.float32) / 255.0).unsqueeze(1)
    return LabelledImages(images, labels[:count])


def refresh_benchmark(
    images: int = 3000, backbone: str = "small_cnn", dims: int = 64, k: int = 100, device="cpu"
) -> list[dict]:
    """Seconds of one inference pass over `images` glyphs and of `NNGKLoss.refresh` with their
    embeddings (an untrained network's, as at the first refresh), and their ratio."""
    from bench.models.embed import embed
    from bench.models.embedding import build_model
    from losses import build_loss

    data = glyph_images(images)
    dev = torch.device(device)
    model = build_model(backbone, dims, "none", 1).to(dev)
    infer_s = seconds_per_call(lambda: embed(model, data, dev), repeats=2)
    emb, labels = embed(model, data, dev)
    emb, labels = emb.to(dev), torch.from_numpy(labels).to(dev)
    params = {"sigma": 1.0, "k": min(k, len(data) - 1)}
    loss = build_loss("nngk", params, num_train=len(data), dims=dims).to(dev)
    refresh_s = seconds_per_call(lambda: loss.refresh(emb, labels), repeats=2)
    return [
        {
            "images": len(data),
            "input": "glyphs 1x28x28",
            "backbone": backbone,
            "dims": dims,
            "k": loss.k,
            "index": "exact" if loss.searches_on(dev) or not loss.approximate else "ivf",
            "inference_s": infer_s,
            "refresh_s": refresh_s,
            "refresh / inference": refresh_s / infer_s,
        }
    ]


def bank_embeddings(n: int, dims: int, seed: int = 0) -> np.ndarray:
    """n points in classes of CLUSTER_SIZE around Gaussian centres: a trained embedding's bank."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(max(1, n // CLUSTER_SIZE), dims))
    labels = rng.integers(0, len(centres), n)
    return (centres[labels] + CLUSTER_SPREAD * rng.normal(size=(n, dims))).astype(np.float32)


def ann_benchmark(
    n: int = 50_000, dims: int = 128, k: int = 100, nprobe: int = 16, sample: int = 20_000
) -> list[dict]:
    """Exact kNN of a bank (every point against every other) against the IVF index (build and
    search), with the IVF lists' recall@k against the exact ones. Above EXACT_ALL_UP_TO points
    exact search is timed on `sample` random queries (against the whole bank) and scaled to
    all n, its cost being linear in the queries; the recall is then over those queries."""
    from bench.util.knn import default_nlist, ivf_knn, knn, knn_recall, recall_at_k

    x = bank_embeddings(n, dims)
    ivf_s, (_, found) = timed(lambda: ivf_knn(x, k, nprobe=nprobe))
    if n <= EXACT_ALL_UP_TO:
        exact_s, (_, exact) = timed(lambda: knn(x, k))
        recall, queries = recall_at_k(found, exact), "all"
    else:
        sample = min(sample, n)
        part_s, recall = timed(lambda: knn_recall(x, found, sample))
        exact_s, queries = part_s * n / sample, f"{sample}, scaled"
    return [
        {
            "items": n,
            "dims": dims,
            "k": found.shape[1],
            "per class": CLUSTER_SIZE,
            "spread": CLUSTER_SPREAD,
            "nlist": default_nlist(n),
            "nprobe": nprobe,
            "exact queries": queries,
            "exact_s": exact_s,
            "ivf_s": ivf_s,
            "speed-up": exact_s / ivf_s,
            "recall@k": recall,
        }
    ]
