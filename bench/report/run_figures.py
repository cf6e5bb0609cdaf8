"""The papers' figures drawn from what runs saved: Fig. 3, Fig. 4a-c, pair distances, PR curves,
mprec@K and a yoked t-SNE of the losses' test embeddings."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from bench.report import figures, tsne
from bench.report.classification import classified_runs, fixed_weights, frozen_backbone
from bench.report.folds import FOLD
from bench.report.run_files import saved_embeddings, saved_numbers
from bench.report.runs import (
    column_or_nan,
    embedded_trained_runs,
    trained_runs,
    variant_labels,
)
from bench.report.table_format import SPLITS, Files
from bench.report.visualize import subsample
from bench.runs import store

TSNE_POINTS = 500  # test points per yoked t-SNE layout (exact t-SNE is O(n^2) per layout)


def examples_frame(part: pd.DataFrame) -> pd.DataFrame:
    """Fig. 3's data: test accuracy against training examples per class (the run's
    train_per_class; for 'all', the median class size of its saved training embeddings)."""
    runs = classified_runs(part)
    runs = runs[~frozen_backbone(runs) & ~fixed_weights(runs)]
    examples = runs["train_per_class"].astype(float)
    every = examples == 0
    examples[every] = runs.loc[every, "path"].map(median_class_size)
    frame = pd.DataFrame(
        {
            "method": variant_labels(runs, ["train_per_class"]),
            "train_per_class": examples,
            "accuracy": column_or_nan(runs, "accuracy").astype(float),
        }
    )
    return frame.dropna()


def median_class_size(run_dir: Path) -> float:
    saved = saved_embeddings(run_dir, store.TRAIN_EMBEDDINGS)
    if saved is None:
        return float("nan")
    return float(np.median(np.unique(saved[1], return_counts=True)[1]))


def neighbours_frame(part: pd.DataFrame) -> pd.DataFrame:
    """Fig. 4a's data: NNGK runs' k with their test accuracy (classify) or R@1."""
    runs = trained_runs(part)
    runs = runs[(runs["loss"] == "nngk") & column_or_nan(runs, "param_k").notna()]
    metric = "accuracy" if len(classified_runs(runs)) == len(runs) and len(runs) else "recall@1"
    return pd.DataFrame(
        {
            "method": variant_labels(runs, ["param_k"]),
            "dims": runs["dims"],
            "k": column_or_nan(runs, "param_k").astype(float),
            metric: runs[metric].astype(float),
        }
    )


def centre_history(part: pd.DataFrame) -> pd.DataFrame:
    """Fig. 4b/4c's data: the history.csv of every NNGK run that logged centre statistics,
    stacked with `run` = its name and size."""
    runs = trained_runs(part)[lambda d: d["loss"] == "nngk"]
    # The K fold models of a setting are one line (mean and sd over folds and seeds).
    folds = column_or_nan(runs, "val_split", "").astype(str).str.extract(FOLD)[1]
    names = variant_labels(runs, ["val_split"]) + folds.map(
        lambda k: f", {k} class folds" if isinstance(k, str) else ""
    ).astype(str)
    frames = []
    for index, run in runs.iterrows():
        history = saved_numbers(Path(run["path"]) / store.HISTORY, ["epoch"])
        if history is not None and "mean_centre_distance" in history:
            frames.append(history.assign(run=f"{names[index]}, d{run['dims']}"))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def first_seeds(part: pd.DataFrame) -> pd.DataFrame:
    """The trained run with the lowest seed of each name and size."""
    runs = trained_runs(part).sort_values(["name", "dims", "seed", "run"])
    return runs.drop_duplicates(["name", "dims"])


def pr_panels(part: pd.DataFrame) -> dict[str, dict[str, pd.DataFrame]]:
    """Seen and unseen precision-recall curves, a line per loss and size (lowest seed)."""
    panels: dict[str, dict[str, pd.DataFrame]] = {}
    for _, run in first_seeds(part).iterrows():
        for split in SPLITS:
            path = Path(run["path"]) / f"pr_{split}.csv"
            curve = saved_numbers(path, ["precision", "recall", "threshold"])
            if curve is not None:
                label = f"{run['name']}, d{run['dims']}, seed {run['seed']}"
                panels.setdefault(f"{split} pairs", {})[label] = curve
    return panels


def distance_panels(part: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Per loss and size (lowest seed) and split, its test pairs' distances (pairs_*.csv)."""
    panels = {}
    for _, run in first_seeds(part).iterrows():
        for split in SPLITS:
            pairs = saved_numbers(Path(run["path"]) / f"pairs_{split}.csv", ["distance", "same"])
            if pairs is not None:
                title = f"{run['name']}, d{run['dims']}, seed {run['seed']}: {split}"
                panels[title] = figures.distance_frame(pairs["distance"], pairs["same"] == 1)
    return panels


def tsne_runs(part: pd.DataFrame) -> pd.DataFrame:
    """One run per loss (and miner) with saved test embeddings, at the size and seed that most
    losses share; of a loss's variants, the one with the most runs in the table."""
    runs = embedded_trained_runs(part)
    if not len(runs):
        return runs
    dims, seed = runs.groupby(["dims", "seed"], sort=True)["method"].nunique().idxmax()
    runs = runs.assign(_runs=runs["name"].map(runs["name"].value_counts()))
    runs = runs[(runs["dims"] == dims) & (runs["seed"] == seed)]
    order = ["method", "_runs", "name", "run"]
    runs = runs.sort_values(order, ascending=[True, False, True, True], kind="stable")
    return runs.drop_duplicates("method").drop(columns="_runs")


def tsne_inputs(part: pd.DataFrame) -> tuple[list[np.ndarray], np.ndarray, list[str]]:
    """tsne_runs' test embeddings of the same test points (at most TSNE_POINTS, the same for
    every run), their labels and titles; nothing when fewer than two losses have them."""
    xs, labels, titles = [], None, []
    for _, run in tsne_runs(part).iterrows():
        x, y = subsample(*saved_embeddings(run["path"], store.EMBEDDINGS), TSNE_POINTS)
        if labels is None or np.array_equal(y, labels):
            xs.append(x)
            labels = y
            titles.append(f"{run['name']}, d{run['dims']}, seed {run['seed']}")
    return (xs, labels, titles) if len(xs) >= 2 else ([], np.zeros(0), [])


def examples_figure(part: pd.DataFrame, table: str) -> Files:
    """<table>-accuracy-vs-examples.png (Meyer et al. 2018 Fig. 3), where the runs differ in it."""
    examples = examples_frame(part)
    if examples["train_per_class"].nunique() < 2:
        return {}
    return {f"{table}-accuracy-vs-examples.png": figures.accuracy_vs_examples(examples)}


def neighbours_figure(part: pd.DataFrame, table: str) -> Files:
    """<table>-neighbours.png (Meyer et al. 2018 Fig. 4a), where NNGK runs differ in k."""
    frame = neighbours_frame(part)
    # A line needs runs that differ in k alone (not tuned studies that chose k among others).
    if not len(frame) or frame.groupby(["method", "dims"])["k"].nunique().max() < 2:
        return {}
    return {f"{table}-neighbours.png": figures.neighbours_effect(frame, frame.columns[-1])}


def centres_figure(part: pd.DataFrame, table: str) -> Files:
    """<table>-centres.png (Meyer et al. 2018 Fig. 4b/4c) from NNGK runs' history.csv."""
    history = centre_history(part)
    if not len(history):
        return {}
    return {f"{table}-centres.png": figures.centre_statistics(history, hue="run")}


def pair_figures(part: pd.DataFrame, table: str) -> Files:
    """<table>-pair-distances.png and <table>-pr.png (the Tiny ImageNet pair-verification report)
    from pairs runs' pr_*.csv."""
    panels = distance_panels(part)
    if not panels:
        return {}
    return {
        f"{table}-pair-distances.png": figures.pair_distance_figure(panels),
        f"{table}-pr.png": figures.pr_curve_panels(pr_panels(part)),
    }


def mprec_figure(part: pd.DataFrame, table: str) -> Files:
    """<table>-mprec.png: mprec@K against K per method and size (Sharma et al. 2015) from
    mprec.csv."""
    frames = [
        curve.assign(method=run["method"], dims=run["dims"])
        for _, run in part.iterrows()
        if (curve := saved_numbers(Path(run["path"]) / "mprec.csv", ["K", "mprec"])) is not None
    ]
    if not frames:
        return {}
    return {f"{table}-mprec.png": figures.mprec_curves(pd.concat(frames, ignore_index=True))}


def tsne_figure(part: pd.DataFrame, table: str) -> Files:
    """<table>-tsne.png: yoked t-SNE of several losses' test embeddings (Liu et al. 2019)."""
    xs, labels, titles = tsne_inputs(part)
    if not xs:
        return {}
    layouts = tsne.yoked_tsne(xs)
    return {f"{table}-tsne.png": tsne.yoked_tsne_figure(layouts, labels, titles)}
