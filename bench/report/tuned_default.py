"""Each tuned loss against its shipped default, on the test split: `tuned-vs-default.md/.csv`.

A study's first trial is the loss's default, so the chosen settings are never below it on
validation; on the test classes they may be (a search that overfits its validation classes, a
budget too short to tell). Per tuned table (`tune`'s `<table>-tuned`), each loss, size and start
(random init, pretrained weights) is set beside the runs of the same loss, size, start, backbone
and embedding in the untuned table (each of their variants a row of its own): the mean over
seeds with its 95 % t interval, where cross-validated (`--cross-validate`) the mean of a seed's
fold models, and Welch's t-test over the seeds' values. Below or above: p < 0.05, with two
seeds or more on each side; not significant otherwise (the query bootstrap of the main tables
has no one set of test embeddings to resample for the mean of several fold models)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from bench.report.folds import complete_seeds, fold_runs
from bench.report.runs import column_or_nan, trained_runs
from bench.report.setup import setup_line
from bench.report.significance import ALPHA, MIN_SEEDS, per_seed_p_value, t_halfwidth
from bench.report.table_format import Files, cell, column_label, github_table, table_files

TUNED_DEFAULT = "tuned-vs-default"
TUNED_SUFFIX = "-tuned"
MATCH = ["loss", "miner", "dims", "weights", "backbone", "embedding"]
COMPARED = ("map@r", "recall@1")


def fold_means(folds: pd.DataFrame, by: list[str]) -> list[tuple[tuple, pd.DataFrame]]:
    """(key, one row per seed: the mean of its fold models) per group of fold runs, each seed
    that has every fold."""
    found = []
    for key, group in folds.groupby(by, dropna=False):
        seeds = complete_seeds(group)
        if seeds:
            means = pd.DataFrame([part[list(COMPARED)].astype(float).mean() for part in seeds])
            found.append((key, means.assign(seed=[part["seed"].iloc[0] for part in seeds])))
    return found


def tuned_per_seed(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per seed of a tuned loss's runs: where they are fold models, the mean of each
    seed's folds (`fold_means`); else each seed's runs' mean."""
    folds = fold_runs(runs)
    if len(folds):
        means = fold_means(folds, ["tuned", "folds"])
        return pd.concat([m for _, m in means]) if means else pd.DataFrame()
    return runs.groupby("seed")[list(COMPARED)].mean().reset_index()


def default_variants(defaults: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(label, one row per seed) of each variant of a loss's default runs: the runs of each
    name; fold models (`run --val-split classes:F/K`, the protocol of a cross-validated study)
    as the mean of each seed's folds, per number of folds and settings."""
    folds = fold_runs(defaults)
    settings = [c for c in folds.columns if c == "lr" or c.startswith("param_")]
    variants = [
        (f"{folds['method'].iloc[0]}, the mean of {int(key[0])} class folds' models", means)
        for key, means in fold_means(folds, ["folds", *settings])
    ]
    rest = defaults.drop(index=folds.index)
    for name, part in rest.groupby("name"):
        variants.append((name, part.groupby("seed")[list(COMPARED)].mean()))
    return variants


def comparison(default: pd.Series, tuned: pd.Series) -> tuple[float, float, str]:
    """(tuned - default, Welch's p, verdict) of two sets of per-seed values."""
    diff = float(tuned.mean() - default.mean())
    if min(len(default), len(tuned)) < MIN_SEEDS:
        return diff, float("nan"), "- (one seed)"
    p = per_seed_p_value(tuned.to_numpy(), default.to_numpy())
    if np.isnan(p) or p >= ALPHA:
        return diff, p, "not significant"
    return diff, p, "above" if diff > 0 else "below"


def table_rows(df: pd.DataFrame, tuned_table: str) -> list[dict]:
    """A row per metric, tuned loss (loss, size, start) and default variant of it."""
    trained = trained_runs(df)
    base = tuned_table.removesuffix(TUNED_SUFFIX)
    defaults = trained[trained["table"] == base]
    found = trained[trained["table"] == tuned_table]
    found = found.assign(tuned=column_or_nan(found, "tuned", "").fillna("").astype(str))
    studies = found.groupby(MATCH, dropna=False)["tuned"].transform("nunique")
    rows = []
    # A study a row: two studies of one loss chose two settings, never one mean of both.
    for (*key, study), tuned in found.groupby([*MATCH, "tuned"], dropna=False):
        match = (defaults[MATCH] == pd.Series(key, index=MATCH)).all(axis=1)
        method = tuned["method"].iloc[0]
        method += f" (study {study})" if studies[tuned.index].iloc[0] > 1 else ""
        tuned_seeds = tuned_per_seed(tuned)
        if tuned_seeds.empty:
            continue
        for name, default_seeds in default_variants(defaults[match]):
            for metric in COMPARED:
                d, t = default_seeds[metric].dropna(), tuned_seeds[metric].dropna()
                diff, p, verdict = comparison(d, t)
                rows.append(
                    {
                        "table": base,
                        **dict(zip(MATCH, key, strict=True)),
                        "method": method,
                        "study": study,
                        "default": name,
                        "metric": metric,
                        "default_mean": d.mean(),
                        "default_ci": t_halfwidth(d),
                        "default_seeds": len(d),
                        "tuned_mean": t.mean(),
                        "tuned_ci": t_halfwidth(t),
                        "tuned_seeds": len(t),
                        "difference": diff,
                        "p": p,
                        "verdict": verdict,
                    }
                )
    return rows


def tuned_default_files(df: pd.DataFrame, name: str = TUNED_DEFAULT) -> Files:
    """tuned-vs-default.md and .csv; nothing where no tuned table has a default to meet."""
    tables = sorted(t for t in trained_runs(df)["table"].unique() if t.endswith(TUNED_SUFFIX))
    rows = pd.DataFrame([r for t in tables for r in table_rows(df, t)])
    if rows.empty:
        return {}
    sections = [f"# Tuned settings against the shipped defaults, on the test split\n\n{SETUP}"]
    for table, part in rows.groupby("table", sort=True):
        setup = "\n\n".join(
            setup_line(df[df["table"] == shown]).replace("Setup:", f"Setup of {which}:", 1)
            for which, shown in (("the defaults", table), ("the tuned runs", table + TUNED_SUFFIX))
        )  # apart: a field would name one loss for both ("lr 0.001 (nngk) / 0.0003 (nngk)")
        sections.append(f"## {table}\n\n{setup}\n\n{github_table(markdown_rows(part), HEADERS)}")
    return table_files(name, "\n\n".join(sections), rows)


HEADERS = ["loss", "dims", "start", "default row", "metric", "default", "tuned", "tuned - default"]
HEADERS += ["p (Welch)", "tuned is"]


def markdown_rows(part: pd.DataFrame) -> list[list]:
    return [
        [
            r["method"],
            int(r["dims"]),
            r["weights"],
            r["default"],
            column_label(r["metric"]),
            f"{cell(r['default_mean'], r['default_ci'])} ({r['default_seeds']})",
            f"{cell(r['tuned_mean'], r['tuned_ci'])} ({r['tuned_seeds']})",
            f"{100 * r['difference']:+.2f}",
            "-" if np.isnan(r["p"]) else f"{r['p']:.2g}",
            r["verdict"],
        ]
        for _, r in part.iterrows()
    ]


SETUP = (
    "Each loss's settings chosen by `tune` (the `-tuned` table; cross-validated: the mean of "
    "each seed's fold models, as the folds' mean of `-folds.md`) beside the runs of the same "
    "loss, size, start, backbone and embedding at their shipped defaults. Values x100, mean ± "
    "95 % t interval over seeds (seeds in brackets). Above or below: Welch's t-test over the "
    "seeds' values, p < 0.05, two seeds or more on each side; the search's first trial is the "
    "default, so a tuned row below its default chose on validation what does not hold on test."
)
