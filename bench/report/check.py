"""Regression check: the runs' metrics against a stored baseline of the same runs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.report.runs import load_runs
from bench.util.atomic import atomic_write_text

KEYS = ["table", "method", "dims"]
CHECKED = ("recall@1", "nmi", "map@r", "accuracy", "seen_accuracy", "unseen_accuracy")


def current_means(results: Path) -> pd.DataFrame:
    """Long table (table, method, dims, metric, value, runs): means over seeds."""
    df, _ = load_runs(results)
    if not len(df):
        return pd.DataFrame(columns=[*KEYS, "metric", "value", "runs"])
    df = df.assign(method=df["name"])  # the report's row: variants (e.g. FC, GAP) apart
    metrics = [m for m in CHECKED if m in df]
    long = df.melt(id_vars=KEYS, value_vars=metrics, var_name="metric").dropna()
    grouped = long.groupby([*KEYS, "metric"])["value"]
    return grouped.agg(value="mean", runs="size").reset_index()


def write_baseline(results: Path, path: Path) -> pd.DataFrame:
    means = current_means(results)
    if not len(means):
        raise ValueError(f"no finished runs in {results}; {path} is left as it is")
    atomic_write_text(path, means.to_csv(index=False, float_format="%.6f"))
    return means


def regressions(results: Path, baseline: Path, tolerance: float) -> list[str]:
    """One line per baseline entry that the runs miss or fall below by more than `tolerance`."""
    try:
        expected = pd.read_csv(baseline)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        raise ValueError(f"unreadable baseline {baseline}: {err}") from None
    missing_cols = {*KEYS, "metric", "value"} - set(expected.columns)
    if missing_cols:
        raise ValueError(f"baseline {baseline} lacks columns: {', '.join(sorted(missing_cols))}")
    if not len(expected):
        raise ValueError(f"baseline {baseline} has no rows; write it with `check --update`")
    values = pd.to_numeric(expected["value"], errors="coerce")
    if values.isna().any():
        line = int(values.isna().to_numpy().argmax()) + 2  # the header is line 1
        raise ValueError(f"baseline {baseline}, line {line}: the value is not a number")
    if not tolerance >= 0:  # also NaN
        raise ValueError(f"--tolerance must be a number >= 0; got {tolerance}")
    expected = expected.assign(value=values)
    now = current_means(results).set_index([*KEYS, "metric"])["value"]
    problems = []
    for row in expected.itertuples(index=False):
        key = (row.table, row.method, row.dims, row.metric)
        name = f"{row.table} / {row.method} / d{row.dims} / {row.metric}"
        if key not in now.index:
            problems.append(f"{name}: no finished run")
        elif now[key] < row.value - tolerance:
            problems.append(
                f"{name}: {now[key]:.4f} < baseline {row.value:.4f} - tolerance {tolerance}"
            )
    return problems
