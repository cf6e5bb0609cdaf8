"""What every data-set reader returns, and its one-line error for a missing or bad layout."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import pandas as pd

# path: absolute image path; label: the data set's own class id (see each reader);
# class_name; x1, y1, x2, y2: bounding box in pixels (NaN where the data set has none);
# split: the data set's official split ("train", "val", "test"), "" where it has none.
COLUMNS = ("path", "label", "class_name", "x1", "y1", "x2", "y2", "split")


class DatasetError(ValueError):
    """A data set that is missing or malformed; the message is one line."""


class DatasetNotFound(DatasetError):
    """A data set, or a file or folder of its layout, that is not where the reader looked."""


def require(path: Path, dataset: str, layout: str, source: str) -> Path:
    """`path` if it exists, else a DatasetNotFound naming it, the expected layout and the
    source."""
    if not Path(path).exists():
        raise DatasetNotFound(
            f"{dataset}: {path} not found; expected {layout}; get it from {source}"
        )
    return Path(path)


def reads_data_root(read: Callable[[Path], pd.DataFrame]) -> Callable[[Path], pd.DataFrame]:
    """A reader of a data set under the data root (--data-root, else $NNGK_DATA, else ~/data),
    whose not-found errors also name that root and say how to give another."""

    @functools.wraps(read)
    def reader(root: Path) -> pd.DataFrame:
        try:
            return listed_once(read(root))
        except DatasetNotFound as err:
            where = Path(root).expanduser().absolute()
            raise DatasetNotFound(
                f"{err}; looked in the data root {where}; to use another, pass --data-root ROOT "
                "or set $NNGK_DATA=ROOT"
            ) from None

    return reader


def listed_once(table: pd.DataFrame) -> pd.DataFrame:
    """The table, if its lists name each image once; else a DatasetError naming one listed more
    than once: a copy in the test split finds itself as its nearest neighbour (R@1 up from 0 to
    1 on a fixture), and one across splits is a test image trained on."""
    repeated = table["path"][table["path"].duplicated()]
    if len(repeated):
        path = repeated.iloc[0]
        raise DatasetError(
            f"{path} is listed {int((table['path'] == path).sum())} times by the data set's "
            f"files ({repeated.nunique()} image(s) listed more than once); list each image once"
        )
    return table


def find_dataset_dir(root: Path, folder: str, marker: str, need) -> Path:
    """`root/folder`, or root itself when it is that folder (by name, or by its `marker` file);
    `need(path)` raises the data set's one-line error for a missing path."""
    root = need(Path(root).expanduser().absolute())
    if (root / folder).is_dir():
        return root / folder
    if root.name == folder or (root / marker).is_file():
        return root
    return need(root / folder)


def malformed(dataset: str, path: Path, problem: str, layout: str = "") -> DatasetError:
    """A malformed file's one-line error; with `layout`, it restates the expected layout."""
    restated = f"; expected {layout}" if layout else ""
    return DatasetError(f"{dataset}: {path}: {problem}{restated}")


def image_table(rows: list[dict] | pd.DataFrame) -> pd.DataFrame:
    """A table with exactly COLUMNS (missing boxes as NaN), in a stable order."""
    df = pd.DataFrame(rows)
    for col in ("x1", "y1", "x2", "y2"):
        if col not in df:
            df[col] = float("nan")
    if "split" not in df:
        df["split"] = ""
    extra = [c for c in df.columns if c not in COLUMNS]
    df = df[list(COLUMNS) + extra]
    df["label"] = df["label"].astype("int64")
    return df.reset_index(drop=True)
