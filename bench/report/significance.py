"""Uncertainty of the main table: 95 % confidence intervals over seeds, and which differences
between losses are significant.

- A cell's interval is Student's t over the distinct seeds of its row (mean ± t * s / sqrt(n)).
- Two rows of one size are compared by a hierarchical bootstrap: each replicate resamples the
  test queries (the same for both rows, so the comparison is paired over queries) and each
  row's seeds, and takes the difference of the mean per-query scores (R@K hit, AP@R) that
  each row's saved test embeddings give; so both the test set's sampling and the training
  runs' spread widen the interval. A difference is significant when its 95 % percentile
  interval excludes 0 and, where both rows have two seeds or more, Welch's t-test over their
  per-seed means agrees (p < 0.05): resampling three seeds understates their spread, the
  t-test does not. NMI, which has no per-query score, gets an interval only. A row with one
  seed is never marked: its spread over seeds is unknown, so no difference to it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from bench.evaluation.retrieval import query_scores
from bench.report.run_files import saved_embeddings
from bench.runs import store

LEVEL = 0.95
REPLICATES = 2000
MIN_SEEDS = 2  # seeds each of two rows needs before their difference can be significant
COMPARED = ("recall@1", "recall@2", "recall@4", "recall@8", "map@r")


def t_halfwidth(values: pd.Series) -> float:
    """Half the width of the 95 % t interval of the mean; NaN for fewer than two values."""
    values = pd.Series(values, dtype=float).dropna()
    n = len(values)
    if n < 2:
        return float("nan")
    return float(stats.t.ppf(0.5 + LEVEL / 2, n - 1) * values.std(ddof=1) / np.sqrt(n))


def run_query_scores(run_dir: Path) -> dict[str, np.ndarray] | None:
    """Per-query scores of a run's saved test embeddings; None where it saved none."""
    saved = saved_embeddings(run_dir, store.EMBEDDINGS)
    return None if saved is None else query_scores(*saved)


@dataclass(frozen=True)
class Difference:
    """Mean of row a minus mean of row b, with its bootstrap interval."""

    diff: float
    low: float
    high: float

    @property
    def significant(self) -> bool:
        return bool(self.low > 0 or self.high < 0)


def bootstrap_difference(
    a: np.ndarray, b: np.ndarray, replicates: int = REPLICATES, seed: int = 0
) -> Difference:
    """a, b: (seeds, queries) per-query scores of two rows on the same test queries (NaN where
    a query has no score). Queries are resampled jointly, seeds per row."""
    a, b = np.atleast_2d(a), np.atleast_2d(b)
    keep = ~(np.isnan(a).any(axis=0) | np.isnan(b).any(axis=0))
    a, b = a[:, keep], b[:, keep]
    rng = np.random.default_rng(seed)
    n = a.shape[1]
    diffs = np.empty(replicates)
    for start in range(0, replicates, 250):
        reps = min(250, replicates - start)
        weights = rng.multinomial(n, np.full(n, 1 / n), size=reps).T / n  # (queries, reps)
        per_seed_a, per_seed_b = a @ weights, b @ weights  # (seeds, reps)
        pick_a = rng.integers(0, len(a), size=(len(a), reps))
        pick_b = rng.integers(0, len(b), size=(len(b), reps))
        cols = np.arange(reps)
        diffs[start : start + reps] = per_seed_a[pick_a, cols].mean(axis=0) - per_seed_b[
            pick_b, cols
        ].mean(axis=0)
    low, high = np.percentile(diffs, [50 * (1 - LEVEL), 50 * (1 + LEVEL)])
    return Difference(float(a.mean() - b.mean()), float(low), float(high))


def row_scores(runs: pd.DataFrame) -> dict[str, np.ndarray] | None:
    """A row's per-query scores as (seeds, queries) arrays, copies of a seed averaged; None
    when a run lacks saved embeddings or its test queries differ from the others'."""
    by_seed: dict[int, list[dict[str, np.ndarray]]] = {}
    for _, run in runs.iterrows():
        scores = run_query_scores(Path(run["path"]))
        if scores is None:
            return None
        by_seed.setdefault(run["seed"], []).append(scores)
    sizes = {len(s["map@r"]) for copies in by_seed.values() for s in copies}
    if len(sizes) != 1:
        return None
    return {
        m: np.stack([np.mean([c[m] for c in copies], axis=0) for copies in by_seed.values()])
        for m in COMPARED
    }


def compare_rows(trained: pd.DataFrame, reference: str | None = None) -> pd.DataFrame:
    """Per size and compared metric: each row against the reference row (`reference`, or the
    row with the best mean), and whether the best row beats the second significantly.
    Columns: name, dims, metric, reference, diff, low, high, p_seeds, significant,
    beats_second."""
    out = []
    for dims, runs in trained.groupby("dims", sort=True):
        scores = {name: row_scores(part) for name, part in runs.groupby("name", sort=True)}
        if not scores or any(v is None for v in scores.values()):
            continue
        if len({v["map@r"].shape[1] for v in scores.values()}) != 1:
            continue
        for metric in COMPARED:
            out += compare_metric(scores, metric, dims, reference)
    columns = ["name", "dims", "metric", "reference", "seeds", "diff", "low", "high", "p_seeds"]
    columns += ["significant"]
    return pd.DataFrame(out, columns=[*columns, "beats_second"])


def seeds_p_value(a: np.ndarray, b: np.ndarray) -> float:
    """Welch's t-test over the two rows' per-seed means; NaN where a row has one seed or
    neither varies (then only the bootstrap decides)."""
    a, b = np.nanmean(np.atleast_2d(a), axis=1), np.nanmean(np.atleast_2d(b), axis=1)
    if len(a) < 2 or len(b) < 2 or (a.std() == 0 and b.std() == 0):
        return float("nan")
    return float(stats.ttest_ind(a, b, equal_var=False).pvalue)


def differs(a: np.ndarray, b: np.ndarray) -> tuple[Difference, float, bool]:
    """The bootstrap difference, Welch's p over seeds, and whether both call it significant:
    with few seeds the bootstrap's seed resampling is too narrow, the t-test is not. Never
    significant where a row has a single seed: resampling its test queries alone says nothing
    of the loss, since another seed moves a row by more than that."""
    d, p = bootstrap_difference(a, b), seeds_p_value(a, b)
    seeds = min(len(np.atleast_2d(a)), len(np.atleast_2d(b)))
    return d, p, seeds >= MIN_SEEDS and d.significant and (np.isnan(p) or p < 1 - LEVEL)


def compare_metric(scores: dict, metric: str, dims: int, reference: str | None) -> list[list]:
    means = {name: float(np.nanmean(v[metric])) for name, v in scores.items()}
    ranked = sorted(means, key=means.get, reverse=True)
    ref = reference if reference in scores else ranked[0]
    beats_second = (
        len(ranked) > 1 and differs(scores[ranked[0]][metric], scores[ranked[1]][metric])[2]
    )
    rows = []
    for name in ranked:
        d, p, significant = differs(scores[name][metric], scores[ref][metric])
        beats = name == ranked[0] and beats_second
        seeds = len(scores[name][metric])
        rows.append([name, dims, metric, ref, seeds, d.diff, d.low, d.high, p, significant, beats])
    return rows
