"""Uncertainty of the main table: 95 % confidence intervals over seeds, and which differences
between losses are significant.

- A cell's interval is Student's t over the distinct seeds of its row (mean ± t * s / sqrt(n)).
- Two rows of one size are compared by a hierarchical bootstrap: each replicate resamples the
  test queries (the same for both rows, so the comparison is paired over queries) and each row's
  seeds, and takes the difference of the mean per-query scores (R@K hit, AP@R) of each row's
  test embeddings, as its runs saved them (`store.QUERY_SCORES`; a run without them is scored
  once from its embeddings, and they are saved for the next report); so both the test set's
  sampling and the training runs' spread widen the interval. A difference is significant when
  its 95 % percentile interval excludes 0 and, where both rows have two seeds or more, Welch's
  t-test over their per-seed means agrees (p < 0.05): resampling three seeds understates their
  spread, the t-test does not. NMI, which has no per-query score, gets an interval only. A row
  with one seed is never marked: its spread over seeds is unknown, so no difference to it is.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from bench.evaluation.metrics import recall_k, retrieval_keys
from bench.evaluation.retrieval import RECALL_KS, distance_fault, gallery_scores, query_scores
from bench.report.run_files import DamagedRun, saved_embeddings, saved_query_flags
from bench.runs import store

LEVEL = 0.95
REPLICATES = 2000
MIN_SEEDS = 2  # seeds each of two rows needs before their difference can be significant
ALPHA = 0.05  # Welch's p below which two rows' per-seed values differ
# What runs of the default Ks before R-Precision compare (`compared_metrics` gives a table's).
COMPARED = ("recall@1", "recall@2", "recall@4", "recall@8", "map@r")
BLOCK = 250  # bootstrap replicates drawn at a time
KEPT_CELLS = 2**24  # queries x replicates of draws kept for the next comparison (32 MB)


def t_halfwidth(values: pd.Series) -> float:
    """Half the width of the 95 % t interval of the mean; NaN for fewer than two values."""
    values = pd.Series(values, dtype=float).dropna()
    n = len(values)
    if n < 2:
        return float("nan")
    return float(stats.t.ppf(0.5 + LEVEL / 2, n - 1) * values.std(ddof=1) / np.sqrt(n))


def compared_metrics(runs: pd.DataFrame) -> tuple[str, ...]:
    """The metrics with a per-query score that every run of a table recorded, in the table's
    order: R@K at its data set's Ks (runs of earlier versions: R@1/2/4/8 on every data set),
    R-Precision (not before it was recorded), MAP@R. A run that computed no MAP@R (NaN, gone
    wrong) decides nothing."""
    computed = runs["map@r"].notna() if "map@r" in runs else pd.Series(True, runs.index)
    keys = [k for k in retrieval_keys(runs.columns) if k != "nmi"]
    return tuple(k for k in keys if computed.any() and runs.loc[computed, k].notna().all())


def recorded_ks(run_dir: Path) -> tuple[int, ...]:
    """The Ks of the Recall@K a run recorded in its metrics.json (R@1/2/4/8 where it cannot be
    read): a run is scored again at its own Ks, never at today's for its data set."""
    try:
        metrics = store.read_metrics(run_dir)
    except ValueError:
        return RECALL_KS
    ks = sorted(k for k in map(recall_k, metrics) if k is not None)
    return tuple(ks) or RECALL_KS


def run_query_scores(
    run_dir: Path, compared: Sequence[str] = COMPARED
) -> dict[str, np.ndarray] | None:
    """Per-query scores of a run's saved test embeddings: those the run saved beside them
    (`store.read_query_scores`: whole, and of the embeddings as they are now, with every
    `compared` metric), else scored once from the embeddings and saved for the next report
    (where the folder cannot be written, used from memory alone); None where the run saved no
    test embeddings."""
    cached = store.read_query_scores(run_dir)
    if cached is not None and all(m in cached for m in compared):
        return cached
    saved = saved_embeddings(run_dir, store.EMBEDDINGS)
    if saved is None:
        return None
    fault = distance_fault(saved[0])
    if fault:  # left out of every table and named, not the end of the table's files
        raise DamagedRun(Path(run_dir) / store.EMBEDDINGS, f"{fault}: they cannot be searched")
    scores = searched_as_saved(run_dir, *saved)
    try:
        store.save_query_scores(run_dir, scores)
    except OSError:  # a read-only results folder: the next report scores it again
        pass
    return scores


def searched_as_saved(run_dir: Path, emb: np.ndarray, labels: np.ndarray) -> dict[str, np.ndarray]:
    """Each query's scores, searched as the run's protocol searched: with query flags saved
    (a protocol with a gallery), the queries in the gallery; else every item among the others;
    R@K at the Ks the run recorded."""
    queries, ks = saved_query_flags(run_dir), recorded_ks(run_dir)
    if queries is None:
        return query_scores(emb, labels, ks=ks)
    q, g = queries, ~queries
    return gallery_scores(emb[q], labels[q], emb[g], labels[g], ks=ks)


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
    return bootstrap_differences([(a, b)], replicates, seed)[0]


def bootstrap_differences(
    pairs: Sequence[tuple[np.ndarray, np.ndarray]], replicates: int = REPLICATES, seed: int = 0
) -> list[Difference]:
    """`bootstrap_difference` of each (a, b) pair, with each block of draws made and applied
    once for all the pairs that share it (as many seeds a side, the same queries kept): a
    table's comparisons do, and at 60,000 queries the draws took 6 s a comparison."""
    kept = [_kept_queries(np.atleast_2d(a), np.atleast_2d(b)) for a, b in pairs]
    groups: dict[tuple, list[int]] = {}
    for i, (a, b, keep) in enumerate(kept):
        groups.setdefault((len(a), len(b), keep.tobytes()), []).append(i)
    out: list[Difference] = [Difference(0.0, 0.0, 0.0)] * len(pairs)
    for members in groups.values():
        rows = [pairs[i] for i in members]
        diffs = _shared_replicates([kept[i][:2] for i in members], rows, replicates, seed)
        for i, d in zip(members, diffs, strict=True):
            a, b = kept[i][:2]
            low, high = np.percentile(d, [50 * (1 - LEVEL), 50 * (1 + LEVEL)])
            out[i] = Difference(float(a.mean() - b.mean()), float(low), float(high))
    return out


def _kept_queries(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Both rows without the queries either has no score for, and which queries are kept."""
    keep = ~(np.isnan(a).any(axis=0) | np.isnan(b).any(axis=0))
    return a[:, keep], b[:, keep], keep


def _shared_replicates(
    kept: list[tuple[np.ndarray, np.ndarray]], rows: list[tuple], replicates: int, seed: int
) -> list[np.ndarray]:
    """Each pair's bootstrap differences over the same draws. A row met in several pairs (the
    same array in `rows`) is resampled once a block, each row by a product of its own (so
    that its values are those of a pair alone, to the bit)."""
    index: dict[int, int] = {}
    unique, sides = [], []
    for (a, b), originals in zip(kept, rows, strict=True):
        for array, original in zip((a, b), originals, strict=True):
            if id(original) not in index:
                index[id(original)] = len(unique)
                unique.append(array)
        sides.append((index[id(originals[0])], index[id(originals[1])]))
    seeds_a, seeds_b, n = len(kept[0][0]), len(kept[0][1]), kept[0][0].shape[1]
    diffs = [np.empty(replicates) for _ in kept]
    start = 0
    for counts, pick_a, pick_b in resamples(n, seeds_a, seeds_b, replicates, seed):
        weights = counts.T / n  # (queries, reps)
        per_seed = [array @ weights for array in unique]  # (seeds, reps) each
        cols = np.arange(len(counts))
        for d, (at_a, at_b) in zip(diffs, sides, strict=True):
            mean_a = per_seed[at_a][pick_a, cols].mean(axis=0)
            d[start : start + len(counts)] = mean_a - per_seed[at_b][pick_b, cols].mean(axis=0)
        start += len(counts)
    return diffs


Draws = tuple[np.ndarray, np.ndarray, np.ndarray]  # (reps, queries) counts; seed picks a, b


def resamples(
    n: int, seeds_a: int, seeds_b: int, replicates: int, seed: int
) -> Sequence[Draws] | Iterator[Draws]:
    """The bootstrap's random draws in blocks of BLOCK replicates: how often each of n queries
    is drawn, and which seeds of each row. They depend on these arguments alone, so every
    comparison of rows with as many queries and seeds has the same, and they are drawn once
    where they are small (`KEPT_CELLS`): the multinomial draws took most of a report's time."""
    if n * replicates <= KEPT_CELLS:
        return _kept_draws(n, seeds_a, seeds_b, replicates, seed)
    return _draws(n, seeds_a, seeds_b, replicates, seed)


@lru_cache(maxsize=4)
def _kept_draws(n: int, seeds_a: int, seeds_b: int, replicates: int, seed: int) -> list[Draws]:
    return list(_draws(n, seeds_a, seeds_b, replicates, seed))


def _draws(n: int, seeds_a: int, seeds_b: int, replicates: int, seed: int) -> Iterator[Draws]:
    rng = np.random.default_rng(seed)
    small = np.uint16 if n < 2**16 else np.int64  # a count is at most n
    for start in range(0, replicates, BLOCK):
        reps = min(BLOCK, replicates - start)
        counts = rng.multinomial(n, np.full(n, 1 / n), size=reps).astype(small)
        pick_a = rng.integers(0, seeds_a, size=(seeds_a, reps))
        pick_b = rng.integers(0, seeds_b, size=(seeds_b, reps))
        yield counts, pick_a, pick_b


def row_scores(
    runs: pd.DataFrame, compared: Sequence[str] = COMPARED
) -> dict[str, np.ndarray] | None:
    """A row's per-query scores as (seeds, queries) arrays, copies of a seed averaged, each
    metric's without the seeds whose recorded value of it is NaN (as the table leaves them
    out); None when a run lacks saved embeddings, its test queries differ from the others', or
    a metric has no seed left."""
    loaded = []
    for _, run in runs.iterrows():
        scores = run_query_scores(Path(run["path"]), compared)
        if scores is None:
            return None
        loaded.append((run, scores))
    if len({len(scores["map@r"]) for _, scores in loaded}) != 1:
        return None
    found = {}
    for m in compared:
        by_seed: dict[int, list[np.ndarray]] = {}
        for run, scores in loaded:
            if not (m in run.index and pd.isna(run[m])):
                by_seed.setdefault(run["seed"], []).append(scores[m])
        if not by_seed:
            return None
        found[m] = np.stack([np.mean(copies, axis=0) for copies in by_seed.values()])
    return found


def compare_rows(trained: pd.DataFrame, reference: str | None = None) -> pd.DataFrame:
    """Per size and compared metric (`compared_metrics`): each row against the reference row
    (`reference`, or the row with the best mean), and whether the best row beats the second
    significantly; rows without per-query scores (`row_scores`) left out.
    Columns: name, dims, metric, reference, diff, low, high, p_seeds, significant,
    beats_second."""
    out, compared = [], compared_metrics(trained)
    for dims, runs in trained.groupby("dims", sort=True):
        # A row whose runs lack their per-query scores is left out (the table names it), not
        # the whole size.
        parts = runs.groupby("name", sort=True)
        found = {name: row_scores(part, compared) for name, part in parts}
        scores = {name: v for name, v in found.items() if v is not None}
        if len(scores) < 2:  # one row: nothing to compare it with (not itself)
            continue
        if len({v["map@r"].shape[1] for v in scores.values()}) != 1:
            continue
        found = size_differences(scores, reference, compared)
        for metric in compared:
            out += compare_metric(scores, metric, dims, reference, found)
    columns = ["name", "dims", "metric", "reference", "seeds", "diff", "low", "high", "p_seeds"]
    columns += ["significant"]
    return pd.DataFrame(out, columns=[*columns, "beats_second"])


def ranking(scores: dict, metric: str, reference: str | None) -> tuple[list[str], str]:
    """The rows by their mean, best first, and the row the others are compared with."""
    means = {name: float(np.nanmean(v[metric])) for name, v in scores.items()}
    ranked = sorted(means, key=means.get, reverse=True)
    return ranked, reference if reference in scores else ranked[0]


def compared_pairs(scores: dict, metric: str, reference: str | None) -> list[tuple[str, str]]:
    """The pairs of rows a metric compares: the best with the second, each with the reference."""
    ranked, ref = ranking(scores, metric, reference)
    best_two = [(ranked[0], ranked[1])] if len(ranked) > 1 else []
    return best_two + [(x, ref) for x in ranked]


def size_differences(
    scores: dict, reference: str | None, compared: Sequence[str] = COMPARED
) -> dict[tuple, Difference]:
    """The bootstrap difference of every pair each metric compares, at one size, by (metric,
    row, other row): all in one pass over the draws each shape of pair shares."""
    keys = [(m, x, y) for m in compared for x, y in compared_pairs(scores, m, reference)]
    pairs = [(scores[x][m], scores[y][m]) for m, x, y in keys]
    return dict(zip(keys, bootstrap_differences(pairs), strict=True))


def seeds_p_value(a: np.ndarray, b: np.ndarray) -> float:
    """Welch's t-test over the two rows' per-seed means; NaN where a row has one seed or
    neither varies (then only the bootstrap decides)."""
    a, b = np.nanmean(np.atleast_2d(a), axis=1), np.nanmean(np.atleast_2d(b), axis=1)
    if len(a) < 2 or len(b) < 2 or (a.std() == 0 and b.std() == 0):
        return float("nan")
    with warnings.catch_warnings():  # nearly equal values: scipy warns; its p is ~1 or NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.ttest_ind(a, b, equal_var=False).pvalue)


def per_seed_p_value(a: np.ndarray, b: np.ndarray) -> float:
    """Welch's p between two rows' per-seed values (one value a seed); NaN with fewer than
    MIN_SEEDS on a side."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if min(len(a), len(b)) < MIN_SEEDS:
        return float("nan")
    # seeds_p_value takes (seeds, queries) rows: one column each, the seed's own value.
    return seeds_p_value(a[:, None], b[:, None])


def judged(d: Difference, a: np.ndarray, b: np.ndarray) -> tuple[Difference, float, bool]:
    """A bootstrap difference with Welch's p over seeds, and whether both call it significant:
    with few seeds the bootstrap's seed resampling is too narrow, the t-test is not. Never
    significant where a row has a single seed: resampling its test queries alone says nothing
    of the loss, since another seed moves a row by more than that."""
    p = seeds_p_value(a, b)
    seeds = min(len(np.atleast_2d(a)), len(np.atleast_2d(b)))
    return d, p, seeds >= MIN_SEEDS and d.significant and (np.isnan(p) or p < 1 - LEVEL)


def compare_metric(
    scores: dict, metric: str, dims: int, reference: str | None, found: dict
) -> list[list]:
    """Each row against the reference on one metric, from the bootstrap differences `found`
    by `size_differences`."""
    ranked, ref = ranking(scores, metric, reference)

    def judge(x: str, y: str) -> tuple[Difference, float, bool]:
        return judged(found[(metric, x, y)], scores[x][metric], scores[y][metric])

    beats_second = len(ranked) > 1 and judge(ranked[0], ranked[1])[2]
    rows = []
    for name in ranked:
        d, p, significant = judge(name, ref)
        beats = name == ranked[0] and beats_second
        seeds = len(scores[name][metric])
        rows.append([name, dims, metric, ref, seeds, d.diff, d.low, d.high, p, significant, beats])
    return rows
