"""The Tiny ImageNet pair-verification report Table 3: the best and worst categories per loss and
split."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from bench.evaluation.pairs import best_and_worst
from bench.report.reference import reference_rows
from bench.report.run_files import saved_numbers
from bench.report.runs import trained_runs
from bench.report.setup import setup_line
from bench.report.significance import t_halfwidth
from bench.report.table_format import (
    INTERVAL,
    SPLITS,
    Files,
    cell,
    github_table,
    parse_setting,
    percent,
    published_section,
    table_files,
)

BEST_WORST = 3  # categories at each end (the Tiny ImageNet pair-verification report Table 3)


def read_categories(run_dir: Path, split: str) -> pd.DataFrame | None:
    path = Path(run_dir) / f"categories_{split}.csv"
    return saved_numbers(path, ["label", "accuracy", "far", "frr"], text=["class_name"])


def mean_categories(frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Per category: accuracy, FAR and FRR averaged over runs (with `<m>_ci`, the 95 % t
    interval's half-width), and `seeds`."""
    grouped = pd.concat(frames).groupby(["label", "class_name"], sort=True)
    metrics = ["accuracy", "far", "frr"]
    table = grouped[metrics].mean()
    for m in metrics:
        table[f"{m}_ci"] = grouped[m].agg(t_halfwidth)
    table["seeds"] = grouped.size()
    return table.reset_index()


def categories_table(part: pd.DataFrame) -> pd.DataFrame:
    """The Tiny ImageNet pair-verification report Table 3: the best and worst categories of each
    loss, size and split, ranked by accuracy averaged over the seeds
    (bench.pairs.best_and_worst)."""
    tables = []
    for (name, dims), runs in trained_runs(part).groupby(["name", "dims"], sort=True):
        for split in SPLITS:
            frames = [read_categories(p, split) for p in runs["path"]]
            frames = [f for f in frames if f is not None]
            if not frames:
                continue
            ranked = mean_categories(frames)
            top = best_and_worst(ranked, BEST_WORST).assign(of=len(ranked))
            tables.append(top.assign(method=name, dims=dims, split=split))
    if not tables:
        return pd.DataFrame()
    table = pd.concat(tables, ignore_index=True)
    first = ["method", "dims", "split", "rank", "position", "of", "label", "class_name"]
    return table[[*first, *(c for c in table.columns if c not in first)]]


def categories_paper(dataset: str, protocol: str) -> str:
    ref = reference_rows(dataset, protocol)
    ref = ref[ref["setting"].str.contains("category=")]
    if not len(ref):
        return ""
    fields = ref["setting"].map(parse_setting)
    ref = ref.assign(
        split=fields.map(lambda f: f.get("tag", "")),
        place=fields.map(lambda f: f.get("rank", "")),
        category=fields.map(lambda f: f.get("category", "")),
    )
    keys = ["paper", "method", "split", "place", "category"]
    wide = ref.pivot_table(
        index=keys, columns="metric", values="value", aggfunc="first", sort=False
    )
    rows = [[*k, *(percent(r[m]) for m in ("accuracy", "far", "frr"))] for k, r in wide.iterrows()]
    headers = ["paper", "method", "split", "rank", "category", "Acc.", "FAR", "FRR"]
    caption = "the Tiny ImageNet pair-verification report Table 3, x100"
    return published_section(caption, github_table(rows, headers))


def categories_files(part: pd.DataFrame, table: str) -> Files:
    """<table>-categories.md and .csv: best and worst categories (the Tiny ImageNet
    pair-verification report Table 3)."""
    ranked = categories_table(part)
    if not len(ranked):
        return {}
    rows = [
        [
            r["method"],
            int(r["dims"]),
            r["split"],
            r["rank"],
            f"{r['position']} of {r['of']}",
            r["class_name"],
            *(cell(r[m], r[f"{m}_ci"]) for m in ("accuracy", "far", "frr")),
            int(r["seeds"]),
        ]
        for _, r in ranked.iterrows()
    ]
    headers = ["loss", "dims", "split", "", "rank", "category", "Acc.", "FAR", "FRR", "seeds"]
    text = (
        f"# {table}: the {BEST_WORST} best and worst categories per loss and split\n\n"
        "Pair verification per category (10 positive + 10 negative pairs per test image; the "
        "positive ones repeat where its class has fewer other test images, and an image alone in "
        f"its class has none), x100, {INTERVAL}, ranked by mean accuracy.\n\n{setup_line(part)}\n\n"
        + github_table(rows, headers)
        + categories_paper(part["dataset"].iloc[0], part["protocol"].iloc[0])
    )
    return table_files(f"{table}-categories", text, ranked)
