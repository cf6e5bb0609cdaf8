"""Regression check: the runs' metrics against a stored baseline of the same runs."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from bench.report.fields import INT_MOST
from bench.report.runs import load_runs
from bench.report.table_format import one_per_seed
from bench.util.atomic import atomic_write_text

KEYS = ["table", "method", "dims"]
CHECKED = ("recall@1", "nmi", "map@r", "accuracy", "seen_accuracy", "unseen_accuracy")


def long_values(results: Path) -> tuple[pd.DataFrame, list[str]]:
    """One row per run and checked metric (table, method, dims, metric, value), NaN kept, copies
    of a seed one run as in the report; only the metrics that some run of the table has (a
    protocol's own metrics in its tables). With the folders skipped, a line each."""
    if not Path(results).is_dir():
        raise ValueError(
            f"results folder {results} does not exist; give --results the folder that `run` "
            "or `suite` wrote into"
        )
    df, skipped = load_runs(results)
    if not len(df):
        return pd.DataFrame(columns=[*KEYS, "metric", "value"]), skipped
    df = df.assign(method=df["name"])  # the report's row: variants (e.g. FC, GAP) apart
    metrics = [m for m in CHECKED if m in df]
    df = one_per_seed(df.astype({m: float for m in metrics}), KEYS, metrics)
    long = df.melt(id_vars=KEYS, value_vars=metrics, var_name="metric")
    long["value"] = long["value"].astype(float)
    applies = long.groupby(["table", "metric"])["value"].transform(lambda v: v.notna().any())
    return long[applies], skipped


def current_means(results: Path) -> tuple[pd.DataFrame, list[str]]:
    """Long table (table, method, dims, metric, value, runs): means over the seeds that have a
    value; a row whose runs all have none is left out (it has no finished run to check). With
    the folders skipped."""
    long, skipped = long_values(results)
    grouped = long.dropna().groupby([*KEYS, "metric"])["value"]
    return grouped.agg(value="mean", runs="size").reset_index(), skipped


def row_name(table: str, method: str, dims: object, metric: str) -> str:
    return f"{table} / {method} / d{dims} / {metric}"


def write_baseline(results: Path, path: Path) -> pd.DataFrame:
    """The baseline from the runs; a ValueError, leaving `path` as it is, where there are no
    runs, a run folder is unfinished or damaged, or a row's runs have no value of a metric (a
    row that could never be checked)."""
    if Path(path).is_dir():
        raise ValueError(f"--baseline {path} is a folder; give the path of a CSV file")
    try:
        long, skipped = long_values(results)
    except ValueError as err:
        raise ValueError(f"{err}; {path} is left as it is") from None
    if not len(long):
        raise ValueError(f"no finished runs in {results}; {path} is left as it is")
    if skipped:  # a baseline without them would check their rows with fewer seeds, or never
        raise ValueError(
            f"{len(skipped)} folder(s) of {results} are unfinished or damaged, e.g. "
            f"{skipped[0]}; finish, retrain (--force) or remove them; {path} is left as it is"
        )
    empty = long.groupby([*KEYS, "metric"])["value"].apply(lambda v: v.isna().all())
    if empty.any():
        names = [row_name(*key) for key in empty[empty].index]
        raise ValueError(
            f"{len(names)} row(s) have no value in any run, e.g. {names[0]} (diverged or "
            f"NaN); rerun or remove those runs; {path} is left as it is"
        )
    means, _ = current_means(results)
    atomic_write_text(path, means.to_csv(index=False, float_format="%.6f"))
    return means


def read_baseline(baseline: Path) -> pd.DataFrame:
    """The stored baseline, every line checked: a ValueError naming the first bad line."""
    try:
        expected = pd.read_csv(baseline)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        raise ValueError(f"unreadable baseline {baseline}: {err}") from None
    missing_cols = {*KEYS, "metric", "value"} - set(expected.columns)
    if missing_cols:
        raise ValueError(f"baseline {baseline} lacks columns: {', '.join(sorted(missing_cols))}")
    if not len(expected):
        raise ValueError(f"baseline {baseline} has no rows; write it with `check --update`")
    for line, row in enumerate(expected.itertuples(index=False), start=2):  # header: line 1
        fault = line_fault(row)
        if fault:
            raise ValueError(f"baseline {baseline}, line {line}: {fault}")
    values = pd.to_numeric(expected["value"])
    return expected.assign(value=values, dims=pd.to_numeric(expected["dims"]).astype(int))


def line_fault(row) -> str:
    """What is wrong with one line of a baseline ('' where nothing): each field read as the
    report reads a run's (`bench.report.fields`), so that no line passes that could never
    fail (a value below 0) or never be met (runs 0.5)."""
    value = as_number(row.value)
    if pd.isna(value):
        return f"the value {row.value!r} is not a number"
    if not math.isfinite(value):
        return f"the value {row.value} is not finite; a baseline must be a measured value"
    if not 0 <= value <= 1:  # recall, NMI, MAP@R, accuracy: every checked metric is a share
        return (
            f"the value {row.value} is outside 0 to 1, where every checked metric lies; write "
            "the baseline from the runs (`check --update`)"
        )
    if row.metric not in CHECKED:
        return f"unknown metric {row.metric!r}; check compares {', '.join(CHECKED)}"
    names = [k for k in ("table", "method") if not isinstance(getattr(row, k), str)]
    if names:
        return f"no {names[0]}; each line names the table, method, dims and metric it checks"
    if not is_count(row.dims):
        return f"dims {row.dims!r} is not a positive integer (1 to {INT_MOST})"
    runs = getattr(row, "runs", math.nan)
    if not pd.isna(runs) and not is_count(runs):
        return (
            f"runs {runs!r} is not a positive integer (the seeds of the mean); give their "
            "number, or leave it empty not to check it"
        )
    return ""


def as_number(value: object) -> float:
    """A CSV cell as a number, NaN where it is none."""
    return pd.to_numeric(pd.Series([value]), errors="coerce").iloc[0]


def is_count(value: object) -> bool:
    """A whole number from 1 to INT_MOST, however the CSV typed it (64, 64.0)."""
    number = as_number(value)
    return bool(not pd.isna(number) and number == int(number) and 1 <= number <= INT_MOST)


def regressions(results: Path, baseline: Path, tolerance: float) -> tuple[list[str], list[str]]:
    """One line per baseline entry that the runs miss, fall below by more than `tolerance`,
    or have fewer seeds of than its `runs` (where the baseline records them); with the folders
    skipped (a line each)."""
    expected = read_baseline(baseline)
    if not tolerance >= 0:  # also NaN
        raise ValueError(f"--tolerance must be a number >= 0; got {tolerance}")
    means, skipped = current_means(results)
    now = means.set_index([*KEYS, "metric"])
    problems = []
    for row in expected.itertuples(index=False):
        key = (row.table, row.method, row.dims, row.metric)
        name = row_name(*key)
        if key not in now.index:
            problems.append(f"{name}: no finished run")
            continue
        value, runs = now.loc[key, "value"], now.loc[key, "runs"]
        if value < row.value - tolerance:
            problems.append(
                f"{name}: {value:.4f} < baseline {row.value:.4f} - tolerance {tolerance}"
            )
        expected_runs = getattr(row, "runs", math.nan)
        if not pd.isna(expected_runs) and runs < expected_runs:
            problems.append(f"{name}: {runs} of the baseline's {int(expected_runs)} runs finished")
    return problems, skipped
