"""Pair verification: balanced same/different pairs, one global distance threshold, FAR/FRR.

The protocol of the Tiny ImageNet verification report: for every test image a fixed number of
positive and negative partners, a single distance threshold chosen on validation pairs
("same" if distance <= threshold), then accuracy, false accept / false reject rates,
precision-recall and a per-category table with the best and worst categories.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from sklearn.metrics import average_precision_score, precision_recall_curve


def _distinct_draws(u: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Per row i, k values in range(m[i]) from uniforms `u` (rows, k).

    Rows with m >= k get k distinct values (Floyd's subset sampling, vectorised over rows);
    rows with 0 < m < k get every value once and the remaining slots uniformly with
    replacement; rows with m == 0 are left as -1.
    """
    rows, k = u.shape
    out = np.full((rows, k), -1, dtype=np.int64)
    m = m.astype(np.int64)
    for s in range(k):
        j = m - k + s  # Floyd: draw t in [0, j]; if already taken, take j (never taken yet)
        t = np.minimum((u[:, s] * (j + 1)).astype(np.int64), j)
        taken = (out[:, :s] == t[:, None]).any(axis=1)
        out[:, s] = np.where(taken, j, t)
    few = m < k
    if few.any():
        slots = np.arange(k)[None, :]
        mf = m[few][:, None]
        refill = np.minimum((u[few] * mf).astype(np.int64), mf - 1)
        out[few] = np.where(mf == 0, -1, np.where(slots < mf, slots, refill))
    return out


def sample_pairs(
    labels: np.ndarray, positives: int = 4, negatives: int = 4, seed: int = 0
) -> np.ndarray:
    """Balanced verification pairs: (i, j, same) rows, int array of shape (M, 3).

    For every image i: `positives` partners j != i of its class (distinct when the class has
    at least `positives` other members; otherwise every other member once and the rest drawn
    with replacement; none when i is alone in its class) and `negatives` distinct partners
    drawn uniformly over all images of other classes (same fallback when there are fewer).
    Rows are ordered by i, its positives first. A fixed seed gives the same pairs.

    Indices are positions in `labels`. Seen and unseen classes are sampled separately, by
    calling this on each subset (`pairs = sample_pairs(labels[idx])`, then `idx[pairs[:, :2]]`
    for indices into the full set), so pairs never mix seen and unseen images.
    """
    labels = np.asarray(labels)
    n = len(labels)
    _, inv, counts = np.unique(labels, return_inverse=True, return_counts=True)
    inv = inv.ravel()
    order = np.argsort(inv, kind="stable")  # images grouped by class
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    start, size = starts[inv], counts[inv]
    offset = np.empty(n, dtype=np.int64)
    offset[order] = np.arange(n) - starts[inv[order]]  # i's position within its class

    rng = np.random.default_rng(seed)
    pos = _distinct_draws(rng.random((n, positives)), size - 1)
    neg = _distinct_draws(rng.random((n, negatives)), n - size)
    # Map draws from "the others" back to sorted positions, skipping i itself / i's class.
    pos_j = np.where(pos < 0, -1, order[start[:, None] + pos + (pos >= offset[:, None])])
    neg_sorted = neg + np.where(neg >= start[:, None], size[:, None], 0)
    neg_j = np.where(neg < 0, -1, order[np.maximum(neg_sorted, 0)])

    j = np.concatenate([pos_j, neg_j], axis=1)
    same = np.repeat([[1] * positives + [0] * negatives], n, axis=0)
    i = np.broadcast_to(np.arange(n)[:, None], j.shape)
    keep = j >= 0
    return np.stack([i[keep], j[keep], same[keep]], axis=1).astype(np.int64)


def pair_distances(embeddings: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """Euclidean distance (float64) between the two embeddings of each (i, j, ...) pair."""
    x = np.asarray(embeddings, dtype=np.float64)
    return np.linalg.norm(x[pairs[:, 0]] - x[pairs[:, 1]], axis=1)


def choose_threshold(distances: np.ndarray, same: np.ndarray) -> float:
    """The global threshold maximising accuracy of "same if distance <= threshold".

    Candidates: just below the smallest distance (reject all), midpoints between consecutive
    distinct distances, and the largest distance (accept all). Ties go to the smallest.
    """
    d = np.asarray(distances, dtype=np.float64)
    same = np.asarray(same).astype(bool)
    if d.size == 0:
        raise ValueError("choose_threshold needs at least one pair")
    values, inv = np.unique(d, return_inverse=True)
    pos_per_value = np.bincount(inv.ravel(), weights=same, minlength=len(values))
    neg_per_value = np.bincount(inv.ravel(), weights=~same, minlength=len(values))
    # Candidate c accepts exactly the c smallest distinct distances.
    accepted_pos = np.concatenate([[0.0], np.cumsum(pos_per_value)])
    accepted_neg = np.concatenate([[0.0], np.cumsum(neg_per_value)])
    correct = accepted_pos + (accepted_neg[-1] - accepted_neg)
    lo, hi = values[:-1], values[1:]
    mid = lo + (hi - lo) / 2
    # Adjacent floats can round the midpoint up onto `hi`, which would also accept `hi`.
    mid = np.where(mid < hi, mid, lo)
    below = np.nextafter(values[0], -np.inf)
    candidates = np.concatenate([[below], mid, values[-1:]])
    return float(candidates[int(np.argmax(correct))])


def _ratio(num: float, den: float) -> float:
    return float(num / den) if den else float("nan")


def verification_metrics(distances: np.ndarray, same: np.ndarray, threshold: float) -> dict:
    """Accuracy, FAR, FRR, precision, recall at `threshold`, plus AP of the score -distance.

    FAR = accepted different pairs / different pairs; FRR = rejected same pairs / same pairs.
    Undefined ratios (no different pairs, no same pairs, nothing accepted) are NaN.
    """
    d = np.asarray(distances, dtype=np.float64)
    same = np.asarray(same).astype(bool)
    accept = d <= threshold
    tp = int((accept & same).sum())
    fp = int((accept & ~same).sum())
    n_pos, n_neg = int(same.sum()), int((~same).sum())
    return {
        "accuracy": _ratio(tp + (n_neg - fp), len(d)),
        "far": _ratio(fp, n_neg),
        "frr": _ratio(n_pos - tp, n_pos),
        "precision": _ratio(tp, tp + fp),
        "recall": _ratio(tp, n_pos),
        "ap": float(average_precision_score(same, -d)) if n_pos else float("nan"),
        "threshold": float(threshold),
        "pairs": len(d),
        "positives": n_pos,
        "negatives": n_neg,
    }


def pr_curve(distances: np.ndarray, same: np.ndarray) -> pd.DataFrame:
    """Precision and recall of "same if distance <= threshold" at each distance threshold.

    Rows are sorted by increasing threshold (increasing recall); sklearn's final
    (recall 0, precision 1) point, which has no threshold, is left out.
    """
    d = np.asarray(distances, dtype=np.float64)
    precision, recall, scores = precision_recall_curve(np.asarray(same).astype(bool), -d)
    table = pd.DataFrame({"precision": precision[:-1], "recall": recall[:-1], "threshold": -scores})
    return table.sort_values("threshold", kind="stable").reset_index(drop=True)


def per_category(
    distances: np.ndarray,
    pairs: np.ndarray,
    labels: np.ndarray,
    threshold: float,
    class_names: Mapping | Sequence | None = None,
) -> pd.DataFrame:
    """Accuracy, FAR and FRR per class of each pair's first (query) image.

    `class_names` maps a label to its name (a mapping, or a sequence indexed by label);
    without it the name is str(label). Sorted by accuracy descending, then label.
    """
    same = pairs[:, 2].astype(bool)
    accept = np.asarray(distances) <= threshold
    frame = pd.DataFrame(
        {
            "label": np.asarray(labels)[pairs[:, 0]],
            "correct": accept == same,
            "false_accept": accept & ~same,
            "false_reject": ~accept & same,
            "same": same,
        }
    )
    grouped = frame.groupby("label", sort=True)
    n_same = grouped["same"].sum()
    n_diff = grouped.size() - n_same
    table = pd.DataFrame(
        {
            "pairs": grouped.size(),
            "accuracy": grouped["correct"].mean(),
            "far": grouped["false_accept"].sum() / n_diff.where(n_diff > 0),
            "frr": grouped["false_reject"].sum() / n_same.where(n_same > 0),
        }
    ).reset_index()
    if class_names is None:
        names = [str(label) for label in table["label"]]
    else:
        names = [class_names[label] for label in table["label"]]
    table.insert(1, "class_name", names)
    table = table.sort_values(["accuracy", "label"], ascending=[False, True], kind="stable")
    return table.reset_index(drop=True)


def best_and_worst(table: pd.DataFrame, n: int = 3) -> pd.DataFrame:
    """The n best and n worst rows of a per_category table (Table 3 of the report).

    Adds `rank` ("best"/"worst") and `position` (1-based place in the full ranking). With
    fewer than 2n rows, "worst" takes only the rows not already among the best.
    """
    ranked = table.sort_values(["accuracy", "label"], ascending=[False, True], kind="stable")
    ranked = ranked.reset_index(drop=True)
    ranked.insert(0, "position", np.arange(1, len(ranked) + 1))
    best = ranked.iloc[:n].assign(rank="best")
    worst = ranked.iloc[max(n, len(ranked) - n) :].assign(rank="worst")
    out = pd.concat([best, worst], ignore_index=True)
    return out[["rank", *[c for c in out.columns if c != "rank"]]]


def distance_distributions(distances: np.ndarray, same: np.ndarray) -> dict:
    """Mean and (population) std of same- and different-pair distances, and their separation.

    `separation` = different mean - same mean, the report's "separation between means".
    """
    d = np.asarray(distances, dtype=np.float64)
    same = np.asarray(same).astype(bool)

    def stats(x: np.ndarray) -> tuple[float, float]:
        return (float(x.mean()), float(x.std())) if x.size else (float("nan"), float("nan"))

    same_mean, same_std = stats(d[same])
    diff_mean, diff_std = stats(d[~same])
    return {
        "same_mean": same_mean,
        "same_std": same_std,
        "different_mean": diff_mean,
        "different_std": diff_std,
        "separation": diff_mean - same_mean,
    }
