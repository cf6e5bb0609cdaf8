"""Meyer et al. 2018 Tables 3-5: test accuracy per data set, backbone and loss, and the ablation."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from bench.protocols import CLASSIFIER, evaluating
from bench.report.runs import column_or_nan, trained_runs, variant_labels
from bench.report.setup import setup_line
from bench.report.significance import t_halfwidth
from bench.report.table_format import (
    INTERVAL,
    Files,
    cell,
    csv_bytes,
    github_table,
    mean_ci_table,
    one_per_seed,
    parse_setting,
    percent,
    published_section,
    reference_for,
    wide_markdown,
)
from bench.runs.config import value_text

CLASSIFICATION = "classification"
CLASSIFY_ROWS = {
    "dataset": "data set",
    "backbone": "backbone",
    "pretrained": "init",
    "dims": "dims",
}


ABLATION_ROWS = {**CLASSIFY_ROWS, "variant": "loss", "learn_weights": "learn weights"}
ABLATION_ROWS["fine_tune"] = "fine-tune"
# How the runs differ in the ablation; the classification table holds the standard runs.
ABLATION_SETTINGS = ("freeze_backbone", "param_learn_weights", "train_per_class")


def classified_runs(df: pd.DataFrame) -> pd.DataFrame:
    """Trained runs with a test accuracy, of the protocols that score a classifier (classify)."""
    if "accuracy" not in df or not len(df):
        return df.iloc[:0]
    classifying = df["protocol"].isin(evaluating(CLASSIFIER))
    return trained_runs(df[classifying & df["accuracy"].notna()])


def _yes_no(flags: pd.Series) -> pd.Series:
    return flags.map(lambda v: "yes" if v else "no")


def fixed_weights(df: pd.DataFrame) -> pd.Series:
    return column_or_nan(df, "param_learn_weights").eq(False)


def frozen_backbone(df: pd.DataFrame) -> pd.Series:
    return column_or_nan(df, "freeze_backbone", False).eq(True)


def classification_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Meyer et al. 2018 Tables 3-4: test accuracy, a row per data set, backbone, initial weights
    and size, a column per loss; standard runs only (trained backbone, learned NNGK weights, every
    training image)."""
    runs = classified_runs(runs)
    runs = runs[~frozen_backbone(runs) & ~fixed_weights(runs) & (runs["train_per_class"] == 0)]
    if not len(runs):
        return pd.DataFrame()
    runs = runs.assign(column=variant_labels(runs, ABLATION_SETTINGS + tuple(CLASSIFY_ROWS)))
    return mean_ci_table(runs, list(CLASSIFY_ROWS), "column", "accuracy")


def ablation_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Meyer et al. 2018 Table 5: NNGK's accuracy with learned or fixed weights and a trained or
    frozen backbone; empty unless some NNGK run has fixed weights or a frozen backbone."""
    runs = classified_runs(runs)
    runs = runs[(runs["loss"] == "nngk") & (runs["train_per_class"] == 0)]
    if not (frozen_backbone(runs).any() or fixed_weights(runs).any()):
        return pd.DataFrame()
    runs = runs.assign(
        learn_weights=_yes_no(~fixed_weights(runs)),
        fine_tune=_yes_no(~frozen_backbone(runs)),
        # any other setting that differs (epochs, sigma) makes a row of its own, as it does
        # in the classification table
        variant=variant_labels(runs, ABLATION_SETTINGS + tuple(CLASSIFY_ROWS)),
    )
    keys = [*CLASSIFY_ROWS, "variant", "fine_tune", "learn_weights"]
    seeds = one_per_seed(runs, keys, ["accuracy"])  # copies of a seed: one run, their mean
    grouped = seeds.groupby(keys, sort=True, dropna=False)["accuracy"]
    table = grouped.agg(["mean", t_halfwidth, "size"]).reset_index()
    return table.rename(columns={"size": "runs", "t_halfwidth": "ci"})


def ablation_markdown(table: pd.DataFrame) -> str:
    rows = [
        [*(value_text(r[c]) for c in ABLATION_ROWS), cell(r["mean"], r["ci"]), int(r["runs"])]
        for _, r in table.iterrows()
    ]
    return "\n## Ablation (Meyer et al. 2018 Table 5): NNGK test accuracy x100\n\n" + github_table(
        rows, [*ABLATION_ROWS.values(), "accuracy", "runs"]
    )


def classification_paper(datasets: Sequence[str], protocol: str) -> str:
    """The published Tables 3-4 (a column per loss) and Table 5 (its settings) of Meyer et al.
    2018 for these data sets under the protocol."""
    ref = reference_for(datasets, protocol)
    if not len(ref):
        return ""
    ref = ref[ref["metric"] == "accuracy"]
    main = ref[ref["table"].isin(["Table 3", "Table 4"])]
    text = ""
    if len(main):
        keys = ["paper", "table", "dataset", "backbone"]
        wide = main.pivot_table(index=keys, columns="loss", values="value", aggfunc="first")
        rows = [[*key, *(percent(v) for v in r)] for key, r in wide.iterrows()]
        text += github_table(rows, ["paper", "table", "data set", "backbone", *wide.columns])
    ablation = ref[ref["table"] == "Table 5"]
    if len(ablation):
        fields = ["initial", "tune sigma", "learn weights", "fine-tune"]
        rows = [
            [r["paper"], r["dataset"], r["backbone"], r["dims"]]
            + [parse_setting(r["setting"]).get(f, "") for f in fields]
            + [percent(r["value"])]
            for _, r in ablation.iterrows()
        ]
        headers = ["paper", "data set", "backbone", "dims", *fields, "accuracy"]
        text += "\nTable 5:\n\n" + github_table(rows, headers)
    return published_section("Meyer et al. 2018 Tables 3-5, test accuracy x100", text)


def classification_files(runs: pd.DataFrame, name: str) -> Files:
    """classification.md and .csv (Tables 3-4), classification-ablation.csv (Table 5)."""
    table = classification_table(runs)
    ablation = ablation_table(runs)
    if not len(table) and not len(ablation):
        return {}
    text = (
        "# Classification: test accuracy x100 per backbone and loss\n\n"
        f"{INTERVAL.capitalize()} (runs = the distinct seeds in the row; the setup line says "
        "which cells have fewer); trained backbone, learned NNGK "
        "weights, every training image (Meyer et al. 2018 Tables 3 and 4).\n\n"
    )
    files: Files = {}
    if len(table):
        text += wide_markdown(table, CLASSIFY_ROWS)
        files[f"{name}.csv"] = csv_bytes(table)
    if len(ablation):
        text += ablation_markdown(ablation)
        files[f"{name}-ablation.csv"] = csv_bytes(ablation)
    text += "".join(
        f"\n{setup_line(part).replace('Setup:', f'Setup of {table}:', 1)}\n"
        for table, part in classified_runs(runs).groupby("table", sort=True)
    )
    for protocol, classified in classified_runs(runs).groupby("protocol", sort=True):
        text += classification_paper(classified["dataset"].unique(), protocol)
    return {f"{name}.md": text.encode(), **files}
