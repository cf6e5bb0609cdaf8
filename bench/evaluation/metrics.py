"""The common evaluator: Recall@K, NMI, R-Precision and MAP@R of one embedding, from one exact
kNN search (`retrieval`)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from bench.evaluation.clustering import (
    BEST_ITERATIONS,
    PML_ITERATIONS,
    announce_kmeans,
    nmi,
    nmi_best_of,
)
from bench.evaluation.retrieval import R_PRECISION, RECALL_KS, gallery_scores, query_scores
from bench.util.progress import duration, log

if TYPE_CHECKING:
    import torch

# What every run's metrics.json holds, whatever its data set's Ks; and, of the default Ks, every
# key an earlier version recorded (runs before R-Precision have none).
REQUIRED_KEYS = ("recall@1", "nmi", "map@r")
METRIC_KEYS = tuple(f"recall@{k}" for k in RECALL_KS) + ("nmi", "map@r")
RECALL_KEY = re.compile(r"recall@(\d+)")


def recall_k(key: str) -> int | None:
    """The K of a `recall@K` metric key; None for any other key (`train_recall@1` included)."""
    found = RECALL_KEY.fullmatch(key)
    return int(found[1]) if found else None


def retrieval_keys(keys: Iterable[str]) -> list[str]:
    """The evaluator's metrics among `keys`, in a table's order: R@K by K, NMI, R-Precision,
    MAP@R (a run records its data set's Ks: `bench.data.recall_ks`)."""
    keys = set(keys)
    recalls = sorted((k for k in keys if recall_k(k) is not None), key=recall_k)
    return [*recalls, *(k for k in ("nmi", R_PRECISION, "map@r") if k in keys)]


BEST_OF = 5  # k-means restarts of `nmi_best_of_5`
RESTARTS_COST = BEST_OF * BEST_ITERATIONS / PML_ITERATIONS  # their iterations against PML's
# A run's `clustering` setting: which NMI its test computes, as evaluate's flags.
CLUSTERING = {
    "full": {"clustering": True, "best_of": True},
    "pml": {"clustering": True, "best_of": False},
    "none": {"clustering": False, "best_of": False},
}
Scores = dict[str, np.ndarray]  # each query's recall@K hits and AP@R, in query order


class Evaluation(NamedTuple):
    """One evaluation's metrics, and each query's scores from the same search (what
    `bench.runs.store.save_query_scores` keeps for the report's bootstrap)."""

    metrics: dict[str, float]
    scores: Scores


def evaluate(
    embeddings: np.ndarray,
    labels: np.ndarray,
    seed: int = 0,
    clustering: bool = True,
    best_of: bool = True,
    chunk: int | None = None,
    *,
    device: torch.device | None = None,
    ks: Sequence[int] = RECALL_KS,
) -> Evaluation:
    """All retrieval and clustering metrics of one embedding of a labelled set: R@K for each K
    of `ks`, R-Precision, MAP@R, and NMI of one
    k-means run as PML's, and (`best_of`) the best of 5 restarts as `nmi_best_of_5`. Without
    `clustering` (validation, which selects by MAP@R) no k-means runs: R@K and MAP@R only.
    `chunk`: queries searched at a time. The scores: each query's, as `retrieval.query_scores`
    gives them. `device`: the search in torch on it, and k-means too
    (`bench.util.torch_kmeans`); None: faiss on the CPU."""
    labels = np.asarray(labels)
    scores = query_scores(embeddings, labels, chunk, device, ks)
    metrics = {key: float(v.mean()) for key, v in scores.items() if recall_k(key) is not None}
    if clustering:
        said = announce_kmeans(embeddings, labels, BEST_OF if best_of else 0)
        start = time.perf_counter()
        metrics["nmi"] = nmi(embeddings, labels, device)
        if said and best_of:
            took = time.perf_counter() - start
            log.info(
                f"NMI: PML's k-means took {took:.0f} s; the {BEST_OF} restarts take about "
                f"{RESTARTS_COST:.1f}x that ({duration(RESTARTS_COST * took)})"
            )
    if clustering and best_of:
        metrics[f"nmi_best_of_{BEST_OF}"] = nmi_best_of(embeddings, labels, seed, BEST_OF, device)
    for key in (R_PRECISION, "map@r"):
        metrics[key] = float(np.nanmean(scores[key]))
    return Evaluation(metrics, scores)


def evaluate_gallery(
    queries: np.ndarray,
    query_labels: np.ndarray,
    gallery: np.ndarray,
    gallery_labels: np.ndarray,
    chunk: int | None = None,
    *,
    device: torch.device | None = None,
    ks: Sequence[int] = RECALL_KS,
) -> Evaluation:
    """R@K, R-Precision and MAP@R of queries searched in a separate gallery (In-Shop's
    protocol): R is the number of gallery items of the query's class, and queries whose class
    has none are left out, as PML's AccuracyCalculator does (`reference=`,
    `ref_includes_query=False`). The scores: each query's, as `retrieval.gallery_scores` gives
    them, NaN for those. `device`, `ks`: as `evaluate`'s."""
    scores = gallery_scores(queries, query_labels, gallery, gallery_labels, chunk, device, ks)
    return Evaluation({key: float(np.nanmean(values)) for key, values in scores.items()}, scores)
