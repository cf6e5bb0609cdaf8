"""The answer a table leads with: per size and headline metric, the best trained row, its margin
over the next, and whether that margin holds beyond the seeds; and, with fewer seeds than a
reader can trust, that more are needed."""

from __future__ import annotations

import numpy as np
import pandas as pd

from bench.report.significance import ALPHA, MIN_SEEDS, per_seed_p_value
from bench.report.table_format import COLUMNS, one_per_seed, percent

HEADLINE = ("recall@1", "map@r", "nmi")  # the metrics the answer speaks of, in this order
# Seeds a row needs before its interval is narrow enough to read: a 95 % t interval over 2
# seeds is 12.7 standard deviations wide either side (t at 1 degree of freedom), over 3 4.3.
READABLE_SEEDS = 3


def answer_text(
    summary: pd.DataFrame, differences: pd.DataFrame | None, trained: pd.DataFrame
) -> str:
    """The answer as markdown lines, '' where the table has no trained row."""
    rows = summary[summary["method"].isin(set(trained["name"]))] if len(trained) else summary[:0]
    if not len(rows):
        return ""
    lines = [
        line
        for dims, part in rows.groupby("dims", sort=True)
        for metric in HEADLINE
        if (line := metric_line(part, int(dims), metric, differences, trained))
    ]
    seeds = int(rows["runs"].min())
    if seeds < READABLE_SEEDS:
        lines.append(few_seeds_line(seeds))
    return "".join(f"- {line}\n" for line in lines)


def metric_line(
    part: pd.DataFrame, dims: int, metric: str, differences: pd.DataFrame | None,
    trained: pd.DataFrame,
) -> str:  # fmt: skip
    """'64-d, R@1: **contrastive** 62.30, 1.20 above triplet-all (61.10); significant ...'."""
    column = f"{metric}_mean"
    if column not in part or part[column].isna().all():
        return ""
    ranked = part.dropna(subset=[column]).sort_values(column, ascending=False)
    best = ranked.iloc[0]
    head = f"{dims}-d, {COLUMNS[metric]}: **{best['method']}** {percent(best[column])}"
    if len(ranked) == 1:
        return f"{head}, the only trained row."
    second = ranked.iloc[1]
    margin = best[column] - second[column]
    head += f", {percent(margin)} above {second['method']} ({percent(second[column])})"
    return f"{head}; {verdict(best, second, dims, metric, differences, trained)}."


def verdict(
    best: pd.Series, second: pd.Series, dims: int, metric: str,
    differences: pd.DataFrame | None, trained: pd.DataFrame,
) -> str:  # fmt: skip
    """Whether best and second differ beyond the seeds: the table's own test where it has one
    (a bootstrap over test queries and seeds with Welch's t-test), else Welch's alone."""
    a, b = (seed_values(trained, r["method"], dims, metric) for r in (best, second))
    seeds = min(len(a), len(b))  # those with a value of the metric, as the table's mean
    if seeds < MIN_SEEDS:
        return f"not tested ({seeds} seed a row; a row needs {MIN_SEEDS} or more)"
    p = per_seed_p_value(a, b)
    beats = beats_second(differences, best["method"], dims, metric)
    if beats is not None:  # the table's own test of the best two, whatever its reference
        significant = beats
        test = "bootstrap over test queries and seeds, and Welch's t-test over the seeds"
    else:
        significant, test = bool(p < ALPHA), "Welch's t-test over the seeds"
    shown = "" if np.isnan(p) else (", p < 0.001" if p < 0.001 else f", p = {p:.3f}")
    if significant:
        said = "significant"
    elif p < ALPHA:  # the seeds differ; the bootstrap over the test queries allows a tie
        said = "not significant (the seeds differ, but resampling the test queries allows a tie)"
    else:
        said = "not significant (a tie within the seeds' spread)"
    return f"{said} over {seeds} seeds ({test}{shown})"


def beats_second(
    differences: pd.DataFrame | None, best: str, dims: int, metric: str
) -> bool | None:
    """Whether the table's comparisons found the best row beating the second (recorded on the
    best row, against whichever reference); None where they did not compare them."""
    if differences is None or not len(differences):
        return None
    d = differences[(differences["dims"] == dims) & (differences["metric"] == metric)]
    top = d[d["name"] == best]
    return bool(top["beats_second"].iloc[0]) if len(top) else None


def seed_values(trained: pd.DataFrame, name: str, dims: int, metric: str) -> np.ndarray:
    """A row's value of `metric` per seed (copies of a seed as their mean)."""
    runs = trained[(trained["name"] == name) & (trained["dims"] == dims)]
    return one_per_seed(runs, ["name"], [metric])[metric].dropna().to_numpy(float)


def few_seeds_line(seeds: int) -> str:
    runs = "1 seed" if seeds == 1 else f"{seeds} seeds"
    return (
        f"With {runs} a row, the intervals are too wide to read and differences can hardly be "
        f"significant: a difference is tested from {MIN_SEEDS} seeds a row, and intervals read "
        f"from {READABLE_SEEDS} or more (`--seed 0,1,2`)."
    )
