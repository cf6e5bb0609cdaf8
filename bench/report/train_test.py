"""Liu et al. 2019 Table 1: R@1 of each embedding (FC, GAP) on the training and the test split."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.evaluation.retrieval import recall_at_k
from bench.report.reference import reference_rows
from bench.report.run_files import saved_embeddings
from bench.report.runs import column_or_nan, trained_runs, variant_labels
from bench.report.setup import setup_line
from bench.report.table_format import (
    INTERVAL,
    Files,
    github_table,
    mean_ci_table,
    parse_setting,
    percent,
    published_section,
    table_files,
    wide_markdown,
)
from bench.runs import store
from bench.runs.config import EMBEDDINGS
from bench.util.knn import knn


def train_recall_at_1(run_dir: Path) -> float:
    """R@1 on a run's saved training embeddings (runs from before train_recall@1 was kept)."""
    saved = saved_embeddings(run_dir, store.TRAIN_EMBEDDINGS)
    if saved is None:
        return float("nan")
    embeddings, labels = saved
    _, idx = knn(embeddings, 1)
    return recall_at_k(labels[idx], labels, ks=(1,))["recall@1"]


def _split_rows(embedding: pd.Series, split: str) -> tuple[pd.Series, pd.Series]:
    """Row labels 'FC (train)' and their order: training rows first, then FC, GAP, backbone."""
    order = {e: i for i, e in enumerate(EMBEDDINGS)}
    rank = embedding.map(lambda e: order.get(e, len(order))) + (0 if split == "train" else 10)
    return embedding.map(lambda e: f"{EMBEDDINGS.get(e, e).split()[0]} ({split})"), rank


def train_test_table(part: pd.DataFrame) -> pd.DataFrame:
    """Liu et al. 2019 Table 1: R@1 of each embedding on the training and the test split, a column
    per method; empty unless the runs have training metrics or several embeddings."""
    runs = trained_runs(part)
    train = column_or_nan(runs, "train_recall@1").astype(float)
    if not (train.notna().any() or runs["embedding"].nunique() > 1):
        return pd.DataFrame()
    missing = train.isna()
    train[missing] = runs.loc[missing, "path"].map(train_recall_at_1)
    column = variant_labels(runs, ["embedding"])
    frames = []
    for split, value in (("train", train), ("test", runs["recall@1"])):
        row, order = _split_rows(runs["embedding"], split)
        frames.append(runs.assign(row=row, order=order, column=column, value=value))
    table = mean_ci_table(pd.concat(frames), ["order", "row", "dims"], "column", "value")
    return table.drop(columns="order")


def train_test_paper(dataset: str, protocol: str) -> str:
    """Liu et al. 2019's Table 1 or 2 for this data set: R@1 per embedding and split, a column per
    selection strategy."""
    ref = reference_rows(dataset, protocol)
    ref = ref[ref["setting"].str.contains("split=") & (ref["metric"] == "recall@1")]
    if not len(ref):
        return ""
    fields = ref["setting"].map(parse_setting)
    embedding = fields.map(lambda f: f.get("embedding", "").lower())
    row, order = _split_rows(embedding, "train")
    test_row, test_order = _split_rows(embedding, "test")
    is_test = fields.map(lambda f: f.get("split") == "test")
    ref = ref.assign(row=row.where(~is_test, test_row), order=order.where(~is_test, test_order))
    keys = ["paper", "table", "order", "row", "dims"]
    wide = ref.pivot_table(index=keys, columns="method", values="value", aggfunc="first")
    rows = [[k[0], k[1], k[3], k[4], *(percent(v) for v in r)] for k, r in wide.iterrows()]
    names = ref.drop_duplicates("method")
    legend = ", ".join(
        f"{r['method']} = {r['loss']}" + (f" ({r['miner']})" if r["miner"] else "")
        for _, r in names.sort_values("method").iterrows()
    )
    body = github_table(rows, ["paper", "table", "embedding (split)", "dims", *wide.columns])
    return published_section(
        "Liu et al. 2019, R@1 x100", f"{legend}; see each row's note in papers.csv.\n\n{body}"
    )


def train_test_files(part: pd.DataFrame, table: str) -> Files:
    """<table>-train-test.md and .csv (Liu et al. 2019 Table 1)."""
    wide = train_test_table(part)
    if not len(wide):
        return {}
    text = (
        f"# {table}: R@1 x100 on the training and the test split (Liu et al. 2019 Table 1)\n\n"
        "Per embedding (FC: a linear layer after the backbone; GAP: its global average "
        f"pooling), {INTERVAL}.\n\n{setup_line(part)}\n\n"
        + wide_markdown(wide, {"row": "embedding (split)", "dims": "dims"})
        + train_test_paper(part["dataset"].iloc[0], part["protocol"].iloc[0])
    )
    return table_files(f"{table}-train-test", text, wide)
