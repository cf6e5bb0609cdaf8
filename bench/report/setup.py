"""The setup stated beside every table: what the runs of a table (or of one row) were trained
with, so that no number is read without its backbone, input, budget and optimiser."""

from __future__ import annotations

import pandas as pd

from bench.report.runs import column_or_nan, format_value, trained_runs
from bench.runs.config import weights_label

# Column of a run's record -> its name in the setup.
SETUP = {
    "backbone": "backbone",
    "pretrained": "weights",
    "input_size": "input",
    "epochs": "epochs",
    "batch_size": "batch",
    "sampler": "sampler",
    "optimizer": "optimizer",
    "lr": "lr",
}


def setup_of(runs: pd.DataFrame) -> dict[str, str]:
    """Each setup field's values among these runs ('-' where the runs did not record it, as
    runs of earlier versions did not), several joined by ' / ', and the number of seeds."""
    found = {}
    for column, name in SETUP.items():
        values = column_or_nan(runs, column).dropna()
        texts = {weights_label(v) if column == "pretrained" else format_value(v) for v in values}
        found[name] = " / ".join(sorted(texts)) or "-"
    found["seeds"] = str(runs["seed"].nunique())
    return found


def setup_line(part: pd.DataFrame) -> str:
    """'Setup: backbone small_cnn; weights random init; ...; seeds 3.' for a table's trained
    runs (its baselines are not trained)."""
    trained = trained_runs(part)
    fields = setup_of(trained if len(trained) else part)
    return "Setup: " + "; ".join(f"{name} {value}" for name, value in fields.items()) + "."


def setup_columns(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """setup_of per group of `keys` (e.g. a table's method and size), one column per field."""
    rows = [{**dict(zip(keys, key, strict=True)), **setup_of(g)} for key, g in df.groupby(keys)]
    return pd.DataFrame(rows, columns=[*keys, *SETUP.values(), "seeds"])
