"""CUB-200-2011: 11,788 images of 200 bird species, read from the official CUB_200_2011 folder.

`root` is the folder holding `CUB_200_2011/` (as the tarball unpacks) or that folder itself.
Labels are the data set's class ids, 1..200; class names are as in classes.txt
(e.g. "001.Black_footed_Albatross"); rows follow images.txt.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.data.sources.base import DatasetError, image_table, reads_data_root, require

DATASET = "CUB-200-2011"
SOURCE = "Caltech (https://www.vision.caltech.edu/datasets/cub_200_2011/)"
FILES = (
    "images.txt",
    "image_class_labels.txt",
    "train_test_split.txt",
    "bounding_boxes.txt",
    "classes.txt",
)
LAYOUT = f"root/CUB_200_2011/ with {', '.join(FILES)} and images/"


@reads_data_root
def read_cub(root: Path) -> pd.DataFrame:
    """The image table of the CUB-200-2011 copy under `root` (see the module doc)."""
    base = _base(Path(root).expanduser().absolute())
    images, labels, splits, boxes, classes = (_read(base / name) for name in FILES)
    ids = list(images)
    for name, table in zip(FILES[1:4], (labels, splits, boxes), strict=True):
        if set(table) != set(ids):
            raise _error(base / name, f"lists other image ids than {base / 'images.txt'}")
    names = {_int(k, base / "classes.txt"): v for k, v in classes.items()}
    folder = require(base / "images", DATASET, LAYOUT, SOURCE)
    rows = []
    for image_id in ids:
        label = _int(labels[image_id], base / "image_class_labels.txt")
        if label not in names:
            raise _error(base / "image_class_labels.txt", f"has class {label}, not in classes.txt")
        x, y, w, h = _floats(boxes[image_id], 4, base / "bounding_boxes.txt")
        rows.append(
            {
                "path": str(folder / images[image_id]),
                "label": label,
                "class_name": names[label],
                "x1": x,
                "y1": y,
                "x2": x + w,
                "y2": y + h,
                "split": _split(splits[image_id], base / "train_test_split.txt"),
            }
        )
    return image_table(rows)


def _base(root: Path) -> Path:
    if root.name != "CUB_200_2011" and not any((root / name).exists() for name in FILES):
        return root / "CUB_200_2011"
    return root


def _read(path: Path) -> dict[str, str]:
    """A file of "<id> <rest>" lines as {id: rest}, in file order."""
    require(path, DATASET, LAYOUT, SOURCE)
    out: dict[str, str] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8-sig").splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split(maxsplit=1)
        if len(parts) != 2 or parts[0] in out:
            raise _error(path, f"line {n} is not a '<id> <value>' line with a new id: {line!r}")
        out[parts[0]] = parts[1].strip()
    return out


def _int(value: str, path: Path) -> int:
    try:
        return int(value)
    except ValueError as err:
        raise _error(path, f"has {value!r} where a whole number belongs") from err


def _floats(value: str, count: int, path: Path) -> list[float]:
    parts = value.split()
    try:
        numbers = [float(p) for p in parts]
    except ValueError:
        numbers = []
    if len(numbers) != count:
        raise _error(path, f"has {value!r} where {count} numbers belong")
    return numbers


def _split(flag: str, path: Path) -> str:
    if flag not in ("0", "1"):
        raise _error(path, f"has is_training_image {flag!r}, expected 0 or 1")
    return "train" if flag == "1" else "test"


def _error(path: Path, problem: str) -> DatasetError:
    return DatasetError(f"{DATASET}: {path} {problem}; expected {LAYOUT}; get it from {SOURCE}")
