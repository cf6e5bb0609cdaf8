"""Stanford Online Products (Song et al. 2016): 120,053 photos of 22,634 products sold on eBay,
in 12 categories, with the published split into classes never seen together: Ebay_train.txt
(11,318 products, 59,551 images) and Ebay_test.txt (the 11,316 others, 60,502 images).

`root` holds `Stanford_Online_Products/` (as the published zip unpacks), or is that folder. Each
split file has the header `image_id class_id super_class_id path`, then one line per image
(`1 1 1 bicycle_final/111085122871_0.JPG`); the images are in the category folders it names.
Labels are the data set's class ids (1..22,634); class_name is the category and the product
("bicycle 111085122871"), `super_class` the category. Rows follow Ebay_train.txt, then
Ebay_test.txt, whose name is the row's split.
"""

from __future__ import annotations

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

NAME = "sop"
SOURCE = "Stanford (https://cvgl.stanford.edu/projects/lifted_struct/)"
# Its own Recall@K, as Song et al. 2016 and the field's SOP tables report it.
RECALL_KS = (1, 10, 100, 1000)
FOLDER = "Stanford_Online_Products"
FILES = {"train": "Ebay_train.txt", "test": "Ebay_test.txt"}
HEADER = ("image_id", "class_id", "super_class_id", "path")
LAYOUT = (
    f"root/{FOLDER}/ (or that folder itself) with Ebay_train.txt and Ebay_test.txt (header "
    f"'{' '.join(HEADER)}', then one line per image) and the category folders they list "
    "(bicycle_final/, ...)"
)


# The reader's one-line errors: a missing file or folder, a malformed one.
_need = functools.partial(require, dataset=NAME, layout=LAYOUT, source=SOURCE)
_bad = functools.partial(malformed, NAME, layout=LAYOUT)


def read_split(path: Path) -> list[tuple[int, int, str]]:
    """(class id, super class id, relative image path) of each line of a split file."""
    lines = _need(path).read_text(encoding="utf-8-sig", errors="replace").splitlines()
    if not lines or tuple(lines[0].split()) != HEADER:
        raise _bad(path, f"does not start with the header '{' '.join(HEADER)}'")
    rows = []
    for number, line in enumerate(lines[1:], start=2):
        fields = line.split()
        if not fields:
            continue
        try:
            _, class_id, super_id = (int(f) for f in fields[:3])
        except ValueError:
            fields = []
        if len(fields) != 4:
            raise _bad(
                path,
                f"line {number} is not 'image_id class_id super_class_id path' "
                f"with whole-number ids: {line.strip()!r}",
            )
        rows.append((class_id, super_id, fields[3]))
    if not rows:
        raise _bad(path, "lists no images")
    return rows


def product_name(relative: str) -> tuple[str, str]:
    """(category, 'category product') of 'bicycle_final/111085122871_0.JPG'."""
    folder, _, file = relative.rpartition("/")
    category = folder.removesuffix("_final")
    return category, f"{category} {Path(file).stem.rpartition('_')[0] or Path(file).stem}"


@reads_data_root
def read_sop(root: Path) -> pd.DataFrame:
    """Every image of both split files (see the module doc)."""
    base = find_dataset_dir(root, FOLDER, FILES["train"], _need)
    rows, seen = [], {}
    for split, name in FILES.items():
        path = base / name
        for class_id, super_id, relative in read_split(path):
            if seen.setdefault(class_id, split) != split:
                raise _bad(
                    path,
                    f"lists class {class_id}, which {FILES[seen[class_id]]} lists "
                    "too; the published split has no class in both",
                )
            category, class_name = product_name(relative)
            rows.append(
                dict(
                    path=str(base / relative),
                    label=class_id,
                    class_name=class_name,
                    split=split,
                    super_class=category,
                    super_class_id=super_id,
                )
            )
    for folder in dict.fromkeys(r["path"].rpartition("/")[0] for r in rows):
        _need(Path(folder))
    return image_table(rows)
