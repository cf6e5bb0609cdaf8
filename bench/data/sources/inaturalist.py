"""iNaturalist 2018 as the retrieval benchmark of Brown et al. 2020 (Smooth-AP): the competition's
train_val2018 images, split by the files the authors published into 5,690 training and 2,452
test categories, none in both.

`root` holds `inaturalist/`, or is that folder: `train_val2018/<supercategory>/<category
id>/<image>.jpg` as the competition's tarball unpacks, and the split files
`Inaturalist_train_set1.txt` and `Inaturalist_test_set1.txt` (in `Inat_dataset_splits/` as the
authors' zip unpacks, or beside train_val2018/), one image path a line relative to that folder
(`train_val2018/Plantae/7477/3b60c9486db1d2ee875f11a669fbde4a.jpg`). The class is the category
folder, as the authors' loader takes it: label the category id, class_name
"Plantae 7477", `supercategory` the supercategory. Rows follow the train file, then the test
file, whose name is the row's split.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pandas as pd

from bench.data.sources.base import (
    image_table,
    malformed,
    reads_data_root,
    require,
)

NAME = "inaturalist"
SOURCE = (
    "the iNaturalist 2018 competition (https://github.com/visipedia/inat_comp/tree/master/2018) "
    "for train_val2018/, and Brown et al. 2020's split files "
    "(https://github.com/Andrew-Brown1/Smooth_AP)"
)
FOLDER = "inaturalist"
IMAGES = "train_val2018"
SPLITS_FOLDER = "Inat_dataset_splits"
FILES = {"train": "Inaturalist_train_set1.txt", "test": "Inaturalist_test_set1.txt"}
LAYOUT = (
    f"root/{FOLDER}/ (or that folder itself) with {IMAGES}/<supercategory>/<category id>/"
    f"<image>.jpg and {SPLITS_FOLDER}/{FILES['train']} and {FILES['test']} (or those two "
    f"beside {IMAGES}/), one path a line such as {IMAGES}/Plantae/7477/<image>.jpg"
)


# The reader's one-line errors: a missing file or folder, a malformed one.
_need = functools.partial(require, dataset=NAME, layout=LAYOUT, source=SOURCE)
_bad = functools.partial(malformed, NAME, layout=LAYOUT)


def dataset_dir(root: Path) -> Path:
    """The folder holding train_val2018/: root itself, or root/inaturalist."""
    root = _need(Path(root).expanduser().absolute())
    if (root / IMAGES).is_dir() or (root / SPLITS_FOLDER).is_dir():
        return root
    return _need(root / FOLDER)


def split_file(base: Path, name: str) -> Path:
    """A split file in Inat_dataset_splits/, else beside train_val2018/."""
    published = base / SPLITS_FOLDER / name
    return base / name if not published.exists() and (base / name).exists() else published


def read_split(path: Path) -> list[tuple[str, str, int]]:
    """(relative path, supercategory, category id) of each line of a split file."""
    rows = []
    text = _need(path).read_text(encoding="utf-8-sig")
    for number, line in enumerate(text.splitlines(), start=1):
        relative = line.strip()
        if not relative:
            continue
        parts = relative.split("/")
        if len(parts) != 4 or parts[0] != IMAGES or not parts[2].isdigit() or not parts[3]:
            raise _bad(
                path,
                f"line {number} is not {IMAGES}/<supercategory>/<category id>/"
                f"<image>: {relative!r}",
            )
        rows.append((relative, parts[1], int(parts[2])))
    if not rows:
        raise _bad(path, "lists no images")
    return rows


@reads_data_root
def read_inaturalist(root: Path) -> pd.DataFrame:
    """Every image of both split files (see the module doc)."""
    base = dataset_dir(root)
    _need(base / IMAGES)
    rows, seen = [], {}
    for split, name in FILES.items():
        path = split_file(base, name)
        for relative, supercategory, category in read_split(path):
            if seen.setdefault(category, split) != split:
                raise _bad(
                    path,
                    f"lists category {category}, which {FILES[seen[category]]} "
                    "lists too; the published split has no category in both",
                )
            rows.append(
                dict(
                    path=str(base / relative),
                    label=category,
                    class_name=f"{supercategory} {category}",
                    split=split,
                    supercategory=supercategory,
                )
            )
    for folder in dict.fromkeys(r["path"].rpartition("/")[0] for r in rows):
        _need(Path(folder))
    return image_table(rows)
