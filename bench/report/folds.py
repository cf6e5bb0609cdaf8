"""Cross-validated final models (Musgrave et al. 2020): a loss's chosen settings trained once
per class fold (`tune --cross-validate`: fold f validated on its own held-out training classes,
`val_split classes:f/K`), each model tested. Per loss and size, `<table>-folds.md/.csv` gives
the folds' mean (each model's own d-dimensional embedding, the mean of the K models' metrics)
and the concatenation (the K models' L2-normalised test embeddings side by side, K x d
dimensions, evaluated as one), each the mean over seeds with its 95 % t interval."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from bench.evaluation.metrics import evaluate, evaluate_gallery, recall_k
from bench.report.fold_ranks import CONCATENATED, SEPARATE, ranked_files
from bench.report.run_files import saved_embeddings, saved_query_flags
from bench.report.runs import column_or_nan, shown_metrics, trained_runs
from bench.report.setup import setup_line
from bench.report.significance import t_halfwidth
from bench.report.table_format import Files, cell, column_label, github_table, table_files
from bench.runs import store
from bench.util.arrays import l2_normalised

FOLDS = "folds"
FOLD = re.compile(r"^classes:(\d+)/(\d+)$")
KEYS = ["method", "weights", "dims", "folds", "tuned"]


def fold_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The trained runs validated on one of K >= 2 class folds, with `fold` and `folds`."""
    runs = trained_runs(runs)
    split = column_or_nan(runs, "val_split", "").astype(str).str.extract(FOLD)
    runs = runs.assign(fold=pd.to_numeric(split[0]), folds=pd.to_numeric(split[1]))
    runs = runs[runs["folds"] >= 2].copy()
    runs["tuned"] = column_or_nan(runs, "tuned", "").fillna("").astype(str)
    return runs


def complete_seeds(part: pd.DataFrame) -> list[pd.DataFrame]:
    """One model per fold for each seed that has every fold (copies of a fold: the first)."""
    folds = int(part["folds"].iloc[0])
    found = []
    for _, runs in part.groupby("seed", sort=True):
        runs = runs.sort_values(["fold", "path"]).drop_duplicates("fold")
        if list(runs["fold"]) == list(range(folds)):
            found.append(runs)
    return found


def concatenated_metrics(
    runs: pd.DataFrame, seed: int, shown: list[str]
) -> dict[str, float] | None:
    """The `shown` metrics (the folds' own: their R@K at the Ks they recorded) of the folds'
    L2-normalised test embeddings side by side; None where a fold saved none or their test
    items differ."""
    parts, labels = [], None
    for path in runs["path"]:
        saved = saved_embeddings(path, store.EMBEDDINGS)
        if saved is None or (labels is not None and not np.array_equal(saved[1], labels)):
            return None
        emb, labels = saved
        parts.append(l2_normalised(emb))
    joined = np.hstack(parts)
    queries = saved_query_flags(runs["path"].iloc[0])
    ks = [k for k in map(recall_k, shown) if k is not None]
    if queries is None:
        found = evaluate(joined, labels, seed=seed, best_of=False, ks=ks).metrics
    else:
        q, g = queries, ~queries
        found = evaluate_gallery(joined[q], labels[q], joined[g], labels[g], ks=ks).metrics
    return {m: found[m] for m in shown if m in found}


def fold_rows(runs: pd.DataFrame) -> pd.DataFrame:
    """Per loss, size and embedding (folds' mean, concatenated): each seed's metrics."""
    rows, folds = [], fold_runs(runs)
    shown = shown_metrics(folds)
    for key, part in folds.groupby(KEYS, sort=True):
        for seed_runs in complete_seeds(part):
            seed = int(seed_runs["seed"].iloc[0])
            base = dict(zip(KEYS, key, strict=True), seed=seed)
            means = seed_runs[shown].astype(float).mean()
            rows.append({**base, "embedding": SEPARATE, **means.to_dict()})
            joined = concatenated_metrics(seed_runs, seed, shown)
            if joined is not None:
                rows.append({**base, "embedding": CONCATENATED, **joined})
    return pd.DataFrame(rows)


def folds_files(runs: pd.DataFrame, table: str) -> Files:
    """`<table>-folds.md` and `.csv`; nothing where no loss has every fold of a seed."""
    per_seed = fold_rows(runs)
    if per_seed.empty:
        return {}
    index = [*KEYS, "embedding"]
    metrics = [m for m in shown_metrics(per_seed) if m in per_seed]
    grouped = per_seed.groupby(index, sort=False)
    summary = grouped[metrics].agg(["mean", t_halfwidth])
    summary.columns = [f"{m}_{'ci' if s == 't_halfwidth' else s}" for m, s in summary.columns]
    summary["seeds"] = grouped.size()
    summary = summary.reset_index()
    several = summary["weights"].nunique() > 1  # e.g. from scratch and from pretrained weights
    rows = [
        [
            f"{r['method']}, {r['weights']}" if several else r["method"],
            int(r["dims"]),
            embedding_text(r["embedding"], int(r["folds"]), int(r["dims"])),
            int(r["seeds"]),
            *[cell(r[f"{m}_mean"], r[f"{m}_ci"]) for m in metrics],
        ]
        for _, r in summary.iterrows()
    ]
    headers = ["loss", "dims", "embedding", "seeds", *[column_label(m) for m in metrics]]
    text = (
        f"# {table}: cross-validated final models\n\n{SETUP}\n\n{setup_line(runs)}\n\n"
        + github_table(rows, headers)
    )
    ranked, ranks_csv = ranked_files(per_seed, table)
    text += f"\n{ranked}" if ranked else ""
    return {**table_files(f"{table}-{FOLDS}", text, per_seed), **ranks_csv}


def embedding_text(kind: str, folds: int, dims: int) -> str:
    if kind == SEPARATE:
        return f"{SEPARATE} ({folds} models of {dims} dims)"
    return f"{CONCATENATED} ({folds} x {dims} = {folds * dims} dims)"


SETUP = (
    "Each loss's settings trained once per class fold (fold f's validation classes held out of "
    "its training and used to choose its checkpoint), each model tested on the test classes, "
    "as in Musgrave et al. 2020: the folds' mean is the mean of the models' metrics, each on "
    "its own embedding; the concatenation evaluates their L2-normalised test embeddings side "
    "by side (NMI of one k-means run). Values x100, mean ± 95 % t interval over seeds (none "
    "with one seed); `-folds.csv` has each seed's values."
)
