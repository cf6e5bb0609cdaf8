"""Embedding health beside MAP@R (issue 16): per loss and size, how many principal components
hold the test embedding's variance and how far apart its classes lie, averaged over seeds."""

from __future__ import annotations

import pandas as pd

from bench.evaluation.health import HEALTH_KEYS
from bench.report.runs import column_or_nan
from bench.report.setup import setup_line
from bench.report.table_format import Files, github_table, one_per_seed, percent, table_files

KEYS = ["name", "dims"]
VALUES = [*HEALTH_KEYS, "map@r"]
HEADERS = [
    "loss",
    "dims",
    "PCs for 90 %",
    "PCs for 99 %",
    "first PC %",
    "intra",
    "inter",
    "intra/inter",
    "closest centroids",
    "MAP@R",
    "seeds",
]
EXPLANATION = (
    "Of each run's test embeddings, as evaluated, averaged over seeds (NaN left out): *PCs for "
    "90 % / 99 %*: how many principal components hold that share of the variance, of the "
    "embedding's size (few: a collapsed or under-used embedding); *first PC %*: the first "
    "component's share of the variance; *intra* / *inter*: the mean Euclidean distance between "
    "two points of the same / of different classes (sampled pairs on large test sets); "
    "*intra/inter*: their ratio (small: tight classes far apart); *closest centroids*: the "
    "distance between the two closest class means; *MAP@R* (x100) beside them."
)


def health_table(part: pd.DataFrame) -> pd.DataFrame:
    """Per method (with its varying settings) and size: the mean over seeds of each health
    number and MAP@R, and the seeds; by size, then MAP@R best first. Empty where no run
    recorded its health (runs of earlier versions)."""
    runs = part[column_or_nan(part, "health_pca_dims").notna()]
    if not len(runs):
        return pd.DataFrame()
    runs = runs.assign(**{v: column_or_nan(runs, v).astype(float) for v in VALUES})
    seeds = one_per_seed(runs, KEYS, VALUES)
    grouped = seeds.groupby(KEYS, sort=True)
    table = grouped[VALUES].mean()
    table["seeds"] = grouped.size()
    table = table.reset_index().rename(columns={"name": "method"})
    return table.sort_values(["dims", "map@r"], ascending=[True, False], kind="stable")


def number(value: float, spec: str) -> str:
    return "-" if pd.isna(value) else format(value, spec)


def components(count: float, dims: float) -> str:
    """'7 of 64'; a mean over seeds to one decimal, '7.5 of 64'."""
    return "-" if pd.isna(count) else f"{round(count, 1):g} of {number(dims, '.0f')}"


def markdown_rows(table: pd.DataFrame) -> list[list]:
    return [
        [
            r["method"],
            int(r["dims"]),
            components(r["health_pca_components_90"], r["health_pca_dims"]),
            components(r["health_pca_components_99"], r["health_pca_dims"]),
            number(100 * r["health_pca_first_share"], ".1f"),
            number(r["health_intra_class_distance_mean"], ".4g"),
            number(r["health_inter_class_distance_mean"], ".4g"),
            number(r["health_intra_inter_ratio"], ".3f"),
            number(r["health_inter_class_centroid_distance_min"], ".4g"),
            percent(r["map@r"]) or "-",
            int(r["seeds"]),
        ]
        for _, r in table.iterrows()
    ]


def health_files(part: pd.DataFrame, table: str) -> Files:
    """<table>-health.md and .csv: embedding health per loss and size, with MAP@R."""
    health = health_table(part)
    if not len(health):
        return {}
    text = (
        f"# {table}: embedding health per loss and size\n\n"
        f"{EXPLANATION}\n\n{setup_line(part)}\n\n" + github_table(markdown_rows(health), HEADERS)
    )
    return table_files(f"{table}-health", text, health)
