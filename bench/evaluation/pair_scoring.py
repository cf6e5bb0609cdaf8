"""Pair verification (pairs protocol): a split's pairs, the threshold chosen on validation, and
the seen and unseen scores with their tables. Retrieval metrics (metrics.py) come from every
protocol."""

from __future__ import annotations

import numpy as np
import pandas as pd

from bench.evaluation import pairs as P

PAIR_SEED = 0  # the same validation and test pairs for every run


def pairs_of(labels: np.ndarray, per_image: int) -> np.ndarray:
    """A split's verification pairs; a one-line error where it has no positive or no negative
    pair, whose accuracy would read 1.0 or NaN."""
    pairs = P.sample_pairs(labels, per_image, per_image, seed=PAIR_SEED)
    kinds = set(pairs[:, 2].tolist())
    if kinds != {0, 1}:
        missing = "positive (two images of a class)" if 1 not in kinds else "negative (two classes)"
        raise ValueError(
            f"pair verification needs {missing} pairs, and a split of {len(labels)} images "
            f"in {len(np.unique(labels))} class(es) has none; give the split more images"
        )
    return pairs


def pair_scores(emb: np.ndarray, labels: np.ndarray, threshold: float, per_image: int = 4):
    """Verification metrics of a split's pairs at a threshold, and the pairs' distances."""
    pairs = pairs_of(labels, per_image)
    dist = P.pair_distances(emb, pairs)
    return P.verification_metrics(dist, pairs[:, 2] == 1, threshold), pairs, dist


def validation_threshold(emb: np.ndarray, labels: np.ndarray) -> float:
    """The one global distance threshold, chosen on validation pairs (never on test)."""
    pairs = pairs_of(labels, 4)
    return P.choose_threshold(P.pair_distances(emb, pairs), pairs[:, 2] == 1)


def pair_report(
    splits: dict[str, tuple[np.ndarray, np.ndarray]], threshold: float, class_names
) -> tuple[dict, dict[str, pd.DataFrame]]:
    """Seen and unseen verification at the validation threshold: flat metrics, and tables
    (the test pairs' distances; precision-recall curves; per-category accuracy, FAR, FRR with
    10+10 pairs per image)."""
    metrics, tables = {"threshold": threshold}, {}
    for name, (emb, labels) in splits.items():
        scores, pairs, dist = pair_scores(emb, labels, threshold)
        same = pairs[:, 2] == 1
        metrics.update({f"{name}_{k}": scores[k] for k in ("accuracy", "far", "frr", "ap")})
        metrics.update({f"{name}_{k}": v for k, v in P.distance_distributions(dist, same).items()})
        tables[f"pairs_{name}"] = pd.DataFrame({"distance": dist, "same": same.astype(int)})
        tables[f"pr_{name}"] = P.pr_curve(dist, same)
        wide = pairs_of(labels, 10)
        tables[f"categories_{name}"] = P.per_category(
            P.pair_distances(emb, wide), wide, labels, threshold, class_names
        )
    return metrics, tables
