"""In-Shop Clothes Retrieval (Liu et al. 2016, DeepFashion): 52,712 shop photos of 7,982 clothing
items. The published partition trains on 25,882 images of 3,997 items and tests by searching
14,218 query images in a gallery of 12,612 images of the 3,985 other items; queries are not
searched among themselves (the query-gallery protocol, `bench.protocols`).

`root` holds the benchmark's folder (`In-shop Clothes Retrieval Benchmark/` as published, or
`Inshop_Clothes/`), or is that folder: `Eval/list_eval_partition.txt` (first line the number of
images, second `image_name item_id evaluation_status`, then lines such as
`img/WOMEN/Dresses/id_00000002/02_1_front.jpg id_00000002 train`, the status train, query or
gallery) and the images under `img/` (or `Img/img/`, where Img/img.zip was unpacked in place).
Labels are the item numbers (id_00000002 -> 2), class_name the item id; split is the status.
Rows follow the partition file.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pandas as pd

from bench.data.sources.base import (
    image_table,
    malformed,
    reads_data_root,
    require,
)

NAME = "inshop"
SOURCE = (
    "the DeepFashion In-shop Clothes Retrieval Benchmark "
    "(https://mmlab.ie.cuhk.edu.hk/projects/DeepFashion/InShopRetrieval.html)"
)
# Its own Recall@K, the field's In-Shop columns (Kim et al. 2020's code computes them and R@50).
RECALL_KS = (1, 10, 20, 30, 40)
FOLDERS = ("In-shop Clothes Retrieval Benchmark", "Inshop_Clothes")
PARTITION = "Eval/list_eval_partition.txt"
HEADER = ("image_name", "item_id", "evaluation_status")
STATUSES = ("train", "query", "gallery")
ITEM = re.compile(r"id_(\d+)")
LAYOUT = (
    f"root/{FOLDERS[0]}/ (or {FOLDERS[1]}/, or that folder itself) with {PARTITION} (the "
    f"number of images, then '{' '.join(HEADER)}', then one line per image with status "
    f"{', '.join(STATUSES)}) and the images under img/ (or Img/img/)"
)


# The reader's one-line errors: a missing file or folder, a malformed one.
_need = functools.partial(require, dataset=NAME, layout=LAYOUT, source=SOURCE)
_bad = functools.partial(malformed, NAME, layout=LAYOUT)


def dataset_dir(root: Path) -> Path:
    """The benchmark's folder: root itself where it holds the partition file, else the first of
    FOLDERS in it."""
    root = _need(Path(root).expanduser().absolute())
    if (root / PARTITION).is_file():
        return root
    for folder in FOLDERS:
        if (root / folder).is_dir():
            return root / folder
    return _need(root / FOLDERS[0])


def image_parent(base: Path) -> Path:
    """The folder holding img/: the benchmark's folder, or its Img/."""
    for parent in (base, base / "Img"):
        if (parent / "img").is_dir():
            return parent
    return _need(base / "img")


def read_partition(path: Path) -> list[tuple[str, str, str]]:
    """(image name, item id, status) of each image line, checked against the stated count."""
    lines = [line.split() for line in _need(path).read_text(encoding="utf-8-sig").splitlines()]
    lines = [fields for fields in lines if fields]
    if len(lines) < 2 or len(lines[0]) != 1 or not lines[0][0].isdigit():
        raise _bad(path, "does not start with the number of images")
    if tuple(lines[1]) != HEADER:
        raise _bad(path, f"has no header line '{' '.join(HEADER)}'")
    rows = lines[2:]
    for number, fields in enumerate(rows, start=3):
        if len(fields) != 3 or not ITEM.fullmatch(fields[1]) or fields[2] not in STATUSES:
            raise _bad(
                path,
                f"line {number} is not 'image_name id_NNNNNNNN status' with status "
                f"{', '.join(STATUSES)}: {' '.join(fields)!r}",
            )
    if int(lines[0][0]) != len(rows) or not rows:
        raise _bad(path, f"says {lines[0][0]} images but lists {len(rows)}")
    return [tuple(fields) for fields in rows]


def check_items_apart(rows: list[tuple[str, str, str]], path: Path) -> None:
    """No item both trains and tests: the published partition tests on unseen items."""
    trained = {item for _, item, status in rows if status == "train"}
    both = sorted(trained & {item for _, item, status in rows if status != "train"})
    if both:
        raise _bad(
            path,
            f"item {both[0]} has both training and query or gallery images; the "
            "published partition tests on items it never trains on",
        )


@reads_data_root
def read_inshop(root: Path) -> pd.DataFrame:
    """Every image of the partition file (see the module doc)."""
    base = dataset_dir(root)
    path = base / PARTITION
    rows = read_partition(path)
    check_items_apart(rows, path)
    parent = image_parent(base)
    table = image_table(
        [
            dict(
                path=str(parent / name),
                label=int(ITEM.fullmatch(item)[1]),
                class_name=item,
                split=status,
            )
            for name, item, status in rows
        ]
    )
    for folder in dict.fromkeys(p.rpartition("/")[0] for p in table["path"]):
        _need(Path(folder))
    return table
