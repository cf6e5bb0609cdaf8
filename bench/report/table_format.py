"""What every table shares: column names, mean ± interval cells, GitHub markdown, the papers'
sections."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
from tabulate import tabulate

from bench.evaluation.metrics import recall_k
from bench.protocols import protocol_columns
from bench.report.reference import reference_rows
from bench.report.significance import t_halfwidth
from bench.runs.config import value_text

# Earlier versions' NMI, then the protocols' own metrics (classify: accuracy; linear: mprec@K;
# pairs: seen and unseen verification), as each protocol declares them.
PROTOCOL_COLUMNS = {"nmi_best_of_5": "NMI (best of 5)", **protocol_columns()}


# The other metrics' headers (R@K: `column_label`).
COLUMNS = {"nmi": "NMI", "r_precision": "R-Prec.", "map@r": "MAP@R"}


def column_label(metric: str) -> str:
    """A metric's column header: R@K for any K (a data set's own Ks), else COLUMNS'."""
    k = recall_k(metric)
    return f"R@{k}" if k is not None else COLUMNS.get(metric, metric)


FLOAT = "%.6f"
# How every table states its uncertainty (cells are `cell(mean, ci)`).
INTERVAL = "mean ± 95 % confidence interval over seeds (Student's t; no interval with one seed)"
Files = dict[str, bytes]


def cell(mean: float, spread: float) -> str:
    if pd.isna(mean):
        return "-"
    text = f"{100 * mean:.2f}"
    return text if pd.isna(spread) else f"{text} ± {100 * spread:.2f}"


def percent(value: float) -> str:
    return "" if pd.isna(value) else f"{100 * value:.2f}"


def github_table(rows: list[list], headers: Sequence[str]) -> str:
    return tabulate(rows, headers=list(headers), tablefmt="github", disable_numparse=True) + "\n"


def csv_bytes(table: pd.DataFrame) -> bytes:
    """A table as every CSV of the report writes it: no index, floats to FLOAT."""
    return table.to_csv(index=False, float_format=FLOAT).encode()


def table_files(stem: str, text: str, table: pd.DataFrame) -> Files:
    """`<stem>.md` (the text) and `<stem>.csv` (the table)."""
    return {f"{stem}.md": text.encode(), f"{stem}.csv": csv_bytes(table)}


def one_per_seed(df: pd.DataFrame, keys: list[str], values: list[str]) -> pd.DataFrame:
    """`values` per `keys` and seed: copies of one seed (the same settings run twice, or by an
    earlier version) are one run, their mean; a value that is NaN in every copy stays NaN."""
    if "seed" not in df:
        return df[[*keys, *values]].assign(seed=range(len(df)))
    return df.groupby([*keys, "seed"], sort=True, dropna=False)[values].mean().reset_index()


def mean_ci_table(df: pd.DataFrame, index: list[str], column: str, value: str) -> pd.DataFrame:
    """A row per `index` value with `<c> mean` and `<c> ci` (half the width of the 95 % t
    interval, as in the main table) of `value` over the seeds for each value c of `column`
    (NaN values left out), and the number of distinct seeds in the row (`runs`)."""
    df = one_per_seed(df, [*index, column], [value])
    stats = df.groupby([*index, column], sort=True, dropna=False)[value].agg(["mean", t_halfwidth])
    stats = stats.unstack(column)
    columns = {}  # built at once: a column inserted at a time fragments a wide frame
    for c in sorted(df[column].unique()):
        columns[f"{c} mean"] = stats[("mean", c)]
        columns[f"{c} ci"] = stats[("t_halfwidth", c)]
    columns["runs"] = df.groupby(index, sort=True, dropna=False)["seed"].nunique()
    return pd.DataFrame(columns, index=stats.index).reset_index()


def wide_markdown(wide: pd.DataFrame, index: dict[str, str]) -> str:
    """mean_ci_table as markdown: the `index` columns (renamed), a mean ± interval cell per
    column value, and the runs."""
    values = [c.removesuffix(" mean") for c in wide.columns if c.endswith(" mean")]
    rows = [
        [
            *(value_text(r[c]) for c in index),
            *(cell(r[f"{v} mean"], r[f"{v} ci"]) for v in values),
            int(r["runs"]),
        ]
        for _, r in wide.iterrows()
    ]
    return github_table(rows, [*index.values(), *values, "runs"])


def parse_setting(setting: str) -> dict[str, str]:
    """A reference row's setting, 'seen; rank=1 of 100; category=pizza', as a dict; the first
    part without '=' under 'tag'."""
    fields: dict[str, str] = {}
    for part in (p.strip() for p in setting.split(";")):
        key, sep, value = part.partition("=")
        if sep:
            fields[key.strip()] = value.strip()
        elif part:
            fields.setdefault("tag", part)
    return fields


def reference_for(datasets: Sequence[str], protocol: str) -> pd.DataFrame:
    frames = [reference_rows(d, protocol) for d in sorted(set(datasets))]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def published_section(title: str, body: str) -> str:
    return f"\n## Published: {title} (from the papers, not measured here)\n\n{body}"


SPLITS = ("seen", "unseen")
