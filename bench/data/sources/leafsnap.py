"""Leafsnap: 185 tree species of the north-eastern US, lab (pressed) and field (phone) images."""

from __future__ import annotations

import csv
import functools
from pathlib import Path

import pandas as pd

from bench.data.sources.base import (
    find_dataset_dir,
    image_table,
    malformed,
    reads_data_root,
    require,
)

NAME = "leafsnap"
SOURCE = "http://leafsnap.com/dataset/"
FOLDER = "leafsnap-dataset"
INDEX = "leafsnap-dataset-images.txt"
LAYOUT = (
    f"root/{FOLDER}/ (or that folder itself) with {INDEX} (tab-separated: file_id, image_path, "
    "segmented_path, species, source) and the dataset/images/... it lists"
)
COLUMNS = ("file_id", "image_path", "segmented_path", "species", "source")
SOURCES = ("lab", "field")


# The reader's one-line errors: a missing file or folder, a malformed one.
_need = functools.partial(require, dataset=NAME, layout=LAYOUT, source=SOURCE)
_bad = functools.partial(malformed, NAME)


def read_index(path: Path) -> pd.DataFrame:
    """The image list, every value a stripped string, checked for its columns and sources."""
    try:
        df = pd.read_csv(
            _need(path), sep="\t", dtype=str, keep_default_na=False, quoting=csv.QUOTE_NONE
        )
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        problem = " ".join(str(err).split())
        raise _bad(path, f"cannot be read as a tab-separated table ({problem})") from err
    df.columns = [str(c).strip() for c in df.columns]
    missing = [c for c in COLUMNS if c not in df]
    if missing:
        header = " ".join(COLUMNS)
        raise _bad(path, f"lacks column(s) {', '.join(missing)}; its header must be {header}")
    df = df[list(COLUMNS)].fillna("").apply(lambda col: col.str.strip())
    if df.empty:
        raise _bad(path, "lists no images")
    for col in ("image_path", "species", "source"):
        blank = (df[col] == "").to_numpy().nonzero()[0]
        if blank.size:
            raise _bad(path, f"data row {blank[0] + 1} has no {col}")
    odd = sorted(set(df["source"]) - set(SOURCES))
    if odd:
        raise _bad(path, f"source must be lab or field, found {odd[0]!r}")
    check_species_spelled_once(path, df["species"])
    return df


def check_species_spelled_once(path: Path, species: pd.Series) -> None:
    """A one-line ValueError for two spellings of one species that differ only in case or
    spaces ('Acer rubrum', 'acer  rubrum'): each would be a class of its own."""
    names = sorted(set(species))
    folded = pd.Series(names).map(lambda n: " ".join(n.casefold().split()))
    twice = folded[folded.duplicated(keep=False)]
    if len(twice):
        first, second = (names[i] for i in twice.index[:2])
        raise _bad(path, f"names one species as {first!r} and {second!r}; spell it one way")


@reads_data_root
def read_leafsnap(root: Path) -> pd.DataFrame:
    """All lab and field images (column `source`); label = index in sorted species, no split."""
    base = find_dataset_dir(root, FOLDER, INDEX, _need)
    index_path = base / INDEX
    df = read_index(index_path)
    paths = [base / p for p in df["image_path"]]
    missing = [p for p in paths if not p.is_file()]
    if missing:
        raise _bad(index_path, f"lists {len(missing)} missing image(s), e.g. {missing[0]}")
    labels = {s: i for i, s in enumerate(sorted(set(df["species"])))}
    table = pd.DataFrame(
        {
            "path": [str(p) for p in paths],
            "label": df["species"].map(labels).to_numpy(),
            "class_name": df["species"].to_numpy(),
            "split": "",
            "source": df["source"].to_numpy(),
        }
    )
    return image_table(table)
