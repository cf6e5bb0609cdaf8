"""Oxford 102 Flowers: 8189 images of 102 flower classes with official train/val/test ids."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.io import loadmat

from bench.data.sources.base import (
    find_dataset_dir,
    image_table,
    malformed,
    reads_data_root,
    require,
)

NAME = "flowers102"
SOURCE = "https://www.robots.ox.ac.uk/~vgg/data/flowers/102/"
FOLDER = "flowers-102"  # torchvision's Flowers102 folder name
LAYOUT = (
    f"root/{FOLDER}/ (or those files directly in root) with jpg/image_00001.jpg ..., "
    "imagelabels.mat and setid.mat"
)
SPLITS = {"trnid": "train", "valid": "val", "tstid": "test"}


# The reader's one-line errors: a missing file or folder, a malformed one.
_need = functools.partial(require, dataset=NAME, layout=LAYOUT, source=SOURCE)
_bad = functools.partial(malformed, NAME)


def _mat_ints(path: Path, key: str) -> np.ndarray:
    """The 1xN integer array `key` of a MATLAB file, flattened."""
    _need(path)
    try:
        mat = loadmat(path)
    except Exception as err:  # scipy raises several types for a corrupt file
        problem = " ".join(str(err).split())
        raise _bad(path, f"cannot be read as a MATLAB file ({problem})") from err
    if key not in mat:
        raise _bad(path, f"has no variable {key!r}")
    values = np.asarray(mat[key], dtype=float).ravel()
    if not np.all(np.isfinite(values) & (values == np.round(values))):
        raise _bad(path, f"{key!r} holds non-integer values")
    return values.astype(np.int64)


def _splits(path: Path, count: int) -> dict[int, str]:
    """image id (1-based) -> official split."""
    split_of: dict[int, str] = {}
    for key, split in SPLITS.items():
        for image_id in _mat_ints(path, key).tolist():
            if not 1 <= image_id <= count:
                raise _bad(path, f"{key!r} holds image id {image_id}, outside 1..{count}")
            if image_id in split_of:
                raise _bad(path, f"image id {image_id} is in both {split_of[image_id]} and {split}")
            split_of[image_id] = split
    return split_of


@reads_data_root
def read_flowers102(root: Path) -> pd.DataFrame:
    """Every labelled image; label is the official class id 1..102, class_name "flower <label>"."""
    base = find_dataset_dir(root, FOLDER, "imagelabels.mat", _need)
    images = _need(base / "jpg")
    labels_path = base / "imagelabels.mat"
    labels = _mat_ints(labels_path, "labels")
    if labels.size == 0 or labels.min() < 1:
        raise _bad(labels_path, "'labels' must hold class ids from 1")
    split_of = _splits(base / "setid.mat", len(labels))
    paths = [images / f"image_{i:05d}.jpg" for i in range(1, len(labels) + 1)]
    present = {p.name for p in images.iterdir()}
    missing = [p.name for p in paths if p.name not in present]
    if missing:
        problem = f"lacks {len(missing)} image(s) listed in imagelabels.mat, e.g. {missing[0]}"
        raise _bad(images, problem)
    rows = [
        dict(path=str(p), label=int(k), class_name=f"flower {k}", split=split_of.get(i, ""))
        for i, (p, k) in enumerate(zip(paths, labels.tolist(), strict=True), 1)
    ]
    return image_table(rows)
