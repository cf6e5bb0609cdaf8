"""The source documents' published numbers, as data with their source, apart from measured results.

`papers.csv` (shipped in this package) is a long table, one published number a row:

- `source`: the seed file the number is transcribed from (e.g. ``000_4c3e1a976edf4b04.txt``);
  `paper`: a short citation; `table`: where in it (``Table 1``, or ``Section 5`` for a number
  given in the text).
- `dataset`, `protocol`, `loss`, `miner`, `backbone`, `dims`: the harness's names where the
  paper's row corresponds to one (empty where it states none or the harness has none);
  `method`: the row as the paper names it; `setting`: the rest of the row's identity.
- `metric`: the harness's metric key (``recall@1`` ... ``nmi``, ``accuracy``, ``far``, ``frr``);
  `value`: the paper's percentage / 100, with its digits exactly; `note`: anything ambiguous.
"""

from __future__ import annotations

from importlib import resources

import pandas as pd

CSV_NAME = "papers.csv"
COLUMNS = (
    "source",
    "paper",
    "table",
    "dataset",
    "protocol",
    "method",
    "loss",
    "miner",
    "backbone",
    "dims",
    "setting",
    "metric",
    "value",
    "note",
)

__all__ = ["COLUMNS", "CSV_NAME", "load_reference", "reference_rows"]


def load_reference() -> pd.DataFrame:
    """Every published number: text columns as str ('' where empty), `dims` as nullable Int64,
    `value` as float (a fraction in [0, 1])."""
    with resources.files(__name__).joinpath(CSV_NAME).open("r", encoding="utf-8") as f:
        df = pd.read_csv(f, dtype=str, keep_default_na=False)
    missing = set(COLUMNS) - set(df.columns)
    if missing:
        raise ValueError(f"{CSV_NAME} lacks columns: {', '.join(sorted(missing))}")
    df = df[list(COLUMNS)]
    df["dims"] = pd.to_numeric(df["dims"].replace("", None)).astype("Int64")
    df["value"] = df["value"].astype(float)
    return df


def reference_rows(dataset: str, protocol: str | None = None) -> pd.DataFrame:
    """The published numbers for one harness data set (and protocol, if given), index reset;
    empty for a data set no paper reports on."""
    df = load_reference()
    keep = df["dataset"] == dataset
    if protocol is not None:
        keep &= df["protocol"] == protocol
    return df[keep].reset_index(drop=True)
