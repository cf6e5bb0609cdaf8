"""The answer a table leads with: per size and headline metric, the best trained row, its margin
over the next, and whether that margin holds beyond the seeds, or that no trained row beats the
baselines, or that the best rows tie; the sizes with the most runs first, so that a few side
runs at another size do not push the main job's answer down; and, with fewer seeds than a
reader can trust, that more are needed."""

from __future__ import annotations

import numpy as np
import pandas as pd

from bench.report.significance import ALPHA, MIN_SEEDS, per_seed_p_value
from bench.report.table_format import column_label, one_per_seed, percent

HEADLINE = ("recall@1", "map@r", "nmi")  # the metrics the answer speaks of, in this order
# Seeds a row needs before its interval is narrow enough to read: a 95 % t interval over 2
# seeds is 12.7 standard deviations wide either side (t at 1 degree of freedom), over 3 4.3.
READABLE_SEEDS = 3


def answer_text(
    summary: pd.DataFrame, differences: pd.DataFrame | None, trained: pd.DataFrame
) -> str:
    """The answer as markdown lines, '' where the table has no trained row."""
    is_trained = summary["method"].isin(set(trained["name"]) if len(trained) else set())
    rows, baselines = summary[is_trained], summary[~is_trained]
    if not len(rows):
        return ""
    parts = [(int(dims), rows[rows["dims"] == dims]) for dims in sizes_by_runs(rows)]
    lines = [
        line
        for dims, part in parts
        for metric in HEADLINE
        if (line := metric_line(part, dims, metric, differences, trained, baselines))
    ]
    seeds = int(rows["runs"].min())
    if seeds < READABLE_SEEDS:
        lines.append(few_seeds_line(seeds))
    return "".join(f"- {line}\n" for line in lines)


def sizes_by_runs(rows: pd.DataFrame) -> list[int]:
    """The sizes of the trained rows, those with the most runs (seeds summed over their rows)
    first, ties by size: the main job's size before a few side runs at another."""
    runs = rows.groupby("dims")["runs"].sum()
    return sorted(runs.index, key=lambda dims: (-runs[dims], dims))


def metric_line(
    part: pd.DataFrame, dims: int, metric: str, differences: pd.DataFrame | None,
    trained: pd.DataFrame, baselines: pd.DataFrame | None = None,
) -> str:  # fmt: skip
    """'64-d, R@1: **contrastive** 62.30, 1.20 above triplet-all (61.10); significant ...';
    'no trained row beats both baselines (...); the best: ...' where the best does not (it
    is not bolded then); 'a tie: ...' where the best rows are equal as shown."""
    column = f"{metric}_mean"
    if column not in part or part[column].isna().all():
        return ""
    ranked = part.dropna(subset=[column]).sort_values([column, "method"], ascending=[False, True])
    best = ranked.iloc[0]
    head = f"{dims}-d, {column_label(metric)}: "
    above = baselines_above(baselines, metric, best[column])
    if above:
        head += f"no trained row beats {above}; the best: "
    tied = ranked[[ties(best[column], value) for value in ranked[column]]]
    if len(tied) > 1:  # no winner to name, so no test between the two
        return f"{head}{tie_text(tied, column)}."
    name = best["method"] if above else f"**{best['method']}**"  # bold: a winner only
    head += f"{name} {percent(best[column])}"
    note = "" if above else interval_note(best, metric, baselines)
    if len(ranked) == 1:
        return f"{head}, the only trained row{note}."
    second = ranked.iloc[1]
    margin = best[column] - second[column]
    head += f", {percent(margin)} above {second['method']} ({percent(second[column])})"
    return f"{head}; {verdict(best, second, dims, metric, differences, trained)}{note}."


def ties(a: float, b: float) -> bool:
    """Whether two values tie as the table shows them (x100, two decimals): equal when shown,
    or apart by less than the last shown digit (82.51 and 82.50, 0.004 apart, read '0.00
    above' as a win)."""
    return percent(a) == percent(b) or percent(abs(a - b)) == percent(0.0)


def tie_text(tied: pd.DataFrame, column: str) -> str:
    """'a tie: contrastive and triplet, both 82.50'; where their values differ, if by less
    than the last shown digit, 'a tie as shown (less than 0.01 apart): ...'."""
    names = sorted(tied["method"])
    named = ", ".join(names[:-1]) + f" and {names[-1]}"
    if tied[column].nunique() == 1:
        each = "both" if len(names) == 2 else "all"
        return f"a tie: {named}, {each} {percent(tied[column].iloc[0])}"
    values = ", ".join(f"{r['method']} {percent(r[column])}" for _, r in tied.iterrows())
    return f"a tie as shown (less than 0.01 apart): {values}"


def baselines_above(baselines: pd.DataFrame | None, metric: str, best: float) -> str:
    """'both baselines: untrained small_cnn 6.69 is at or above every trained row' where the
    best trained row's mean does not beat every baseline row of `metric` (a tie as shown is
    no win), naming those it does not beat, best first; '' where it beats them all."""
    column = f"{metric}_mean"
    if baselines is None or column not in baselines:
        return ""
    values = baselines.dropna(subset=[column]).sort_values(column, ascending=False)
    unbeaten = values[[v >= best or ties(best, v) for v in values[column]]]
    if not len(unbeaten):
        return ""
    if len(unbeaten) == len(values):
        which = "the baseline" if len(values) == 1 else "the baselines"
    else:
        which = "both baselines" if len(values) == 2 else "every baseline"
    names = [f"{r['method']} {percent(r[column])}" for _, r in unbeaten.iterrows()]
    named = f"{', '.join(names[:-1])} and {names[-1]} are" if len(names) > 1 else f"{names[0]} is"
    return f"{which}: {named} at or above every trained row"


def interval_note(best: pd.Series, metric: str, baselines: pd.DataFrame | None) -> str:
    """'; not clearly above the baselines: ...' where the best row's mean beats every baseline
    but the lower end of its interval does not (the rule of the note under the table)."""
    column, ci = f"{metric}_mean", f"{metric}_ci"
    if baselines is None or column not in baselines or ci not in best or pd.isna(best[ci]):
        return ""
    values = baselines[column].dropna()
    if not len(values) or best[column] - best[ci] > values.max():
        return ""
    low = percent(best[column] - best[ci])
    return (
        f"; not clearly above the baselines: its interval reaches down to {low}, the better "
        f"baseline is at {percent(values.max())}"
    )


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
