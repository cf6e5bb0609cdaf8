"""Cars196 (Stanford Cars): 16,185 images of 196 car models, read from either official layout.

`root` holds one of:

- the metric-learning papers' layout: `root/cars_annos.mat` and `root/car_ims/000001.jpg ...`;
  the split is the `test` flag of each annotation;
- torchvision's `StanfordCars` layout (`root` is what you would pass to torchvision):
  `root/stanford_cars/devkit/{cars_meta.mat, cars_train_annos.mat}`,
  `root/stanford_cars/cars_test_annos_withlabels.mat`, `root/stanford_cars/cars_{train,test}/`;
  the split is the folder. `root` may also be the `stanford_cars` folder itself.

The papers' layout wins where both are present. Labels are the data set's class ids, 1..196.
Rows follow the annotation files: cars_annos.mat order, or the train file then the test file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import scipy.io

from bench.data.sources.base import (
    DatasetError,
    DatasetNotFound,
    image_table,
    reads_data_root,
    require,
)

DATASET = "Cars196"
SOURCE = (
    "the Stanford AI Lab (https://ai.stanford.edu/~jkrause/cars/car_dataset.html) "
    "or a mirror of torchvision's StanfordCars"
)
ANNOS_LAYOUT = "root/cars_annos.mat with root/car_ims/*.jpg"
TV_LAYOUT = (
    "root/stanford_cars/ with devkit/cars_meta.mat, devkit/cars_train_annos.mat, "
    "cars_test_annos_withlabels.mat, cars_train/ and cars_test/"
)
LAYOUT = f"{ANNOS_LAYOUT}, or {TV_LAYOUT}"
BOX = ("bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2")


@reads_data_root
def read_cars196(root: Path) -> pd.DataFrame:
    """The image table of the Cars196 copy under `root` (either layout, see the module doc)."""
    root = Path(root).expanduser().absolute()
    if (root / "cars_annos.mat").exists():
        return _read_annos(root)
    base = _torchvision_base(root)
    if base is not None:
        return _read_torchvision(base)
    raise DatasetNotFound(
        f"{DATASET}: neither {root / 'cars_annos.mat'} nor {root / 'stanford_cars'} found; "
        f"expected {LAYOUT}; get it from {SOURCE}"
    )


def _torchvision_base(root: Path) -> Path | None:
    if (root / "stanford_cars").is_dir():
        return root / "stanford_cars"
    return root if (root / "devkit").is_dir() else None


def _read_annos(root: Path) -> pd.DataFrame:
    mat_path = root / "cars_annos.mat"
    mat = _load_mat(mat_path, ("annotations", "class_names"))
    names = _class_names(mat["class_names"], mat_path)
    fields = ("relative_im_path", *BOX, "class", "test")
    rows = [
        _row(root / str(r["relative_im_path"]), r, names, mat_path, _split(r["test"], mat_path))
        for r in _records(mat["annotations"], mat_path, fields)
    ]
    _require_folders(rows, ANNOS_LAYOUT)
    return image_table(rows)


def _read_torchvision(base: Path) -> pd.DataFrame:
    devkit = base / "devkit"
    meta_path = devkit / "cars_meta.mat"
    names = _class_names(_load_mat(meta_path, ("class_names",))["class_names"], meta_path)
    rows = []
    for split, mat_path, folder in (
        ("train", devkit / "cars_train_annos.mat", base / "cars_train"),
        ("test", base / "cars_test_annos_withlabels.mat", base / "cars_test"),
    ):
        records = _records(
            _load_mat(mat_path, ("annotations",))["annotations"], mat_path, (*BOX, "class", "fname")
        )
        require(folder, DATASET, TV_LAYOUT, SOURCE)
        rows += [_row(folder / str(r["fname"]), r, names, mat_path, split) for r in records]
    return image_table(rows)


def _load_mat(path: Path, keys: tuple[str, ...]) -> dict:
    require(path, DATASET, LAYOUT, SOURCE)
    try:
        mat = scipy.io.loadmat(str(path), squeeze_me=True, struct_as_record=False)
    except Exception as err:  # scipy raises several types for a corrupt or foreign file
        raise _error(path, f"is not a readable .mat file ({_one_line(err)})") from err
    missing = [k for k in keys if k not in mat]
    if missing:
        raise _error(path, f"has no variable {', '.join(missing)}")
    return mat


def _records(value: object, path: Path, fields: tuple[str, ...]) -> list[dict]:
    """A MATLAB struct array (1xN, Nx1 or 1x1, or one struct of equal-length columns as some
    re-saved copies have it) as one dict of scalars per element."""
    items = list(np.atleast_1d(np.asarray(value, dtype=object)).ravel())
    if not items or not all(hasattr(item, "_fieldnames") for item in items):
        raise _error(path, "holds no annotations struct array")
    missing = sorted({f for item in items for f in fields if f not in item._fieldnames})
    if missing:
        raise _error(path, f"has no field {', '.join(missing)} in its annotations")
    rows = [{f: getattr(item, f) for f in fields} for item in items]
    if len(rows) == 1 and all(np.ndim(v) == 1 and np.size(v) > 1 for v in rows[0].values()):
        columns = list(rows[0].values())
        if len({len(c) for c in columns}) != 1:
            raise _error(path, "has annotation columns of different lengths")
        rows = [dict(zip(fields, vals, strict=True)) for vals in zip(*columns, strict=True)]
    return [{f: _scalar(v, path, f) for f, v in row.items()} for row in rows]


def _scalar(value: object, path: Path, field: str) -> object:
    flat = np.asarray(value, dtype=object).ravel()
    if flat.size != 1:
        raise _error(path, f"has a field {field} holding {flat.size} values instead of one")
    return flat[0]


def _class_names(value: object, path: Path) -> list[str]:
    names = np.atleast_1d(np.asarray(value, dtype=object)).ravel()
    return [str(_scalar(n, path, "class_names")).strip() for n in names]


def _row(path: Path, rec: dict, names: list[str], mat_path: Path, split: str) -> dict:
    try:
        label = int(rec["class"])
        box = {k: float(rec[f"bbox_{k}"]) for k in ("x1", "y1", "x2", "y2")}
    except (TypeError, ValueError) as err:
        raise _error(mat_path, f"has a non-numeric class or box ({_one_line(err)})") from err
    if not 1 <= label <= len(names):
        raise _error(mat_path, f"has class {label} outside 1..{len(names)} (its class names)")
    return {
        "path": str(path),
        "label": label,
        "class_name": names[label - 1],
        **box,
        "split": split,
    }


def _split(test_flag: object, path: Path) -> str:
    try:
        flag = float(test_flag)
    except (TypeError, ValueError):
        flag = float("nan")
    if flag not in (0.0, 1.0):
        raise _error(path, f"has a test flag {test_flag!r}, expected 0 or 1")
    return "test" if flag else "train"


def _require_folders(rows: list[dict], layout: str) -> None:
    for folder in dict.fromkeys(Path(r["path"]).parent for r in rows):
        require(folder, DATASET, layout, SOURCE)


def _error(path: Path, problem: str) -> DatasetError:
    return DatasetError(f"{DATASET}: {path} {problem}; expected {LAYOUT}; get it from {SOURCE}")


def _one_line(err: Exception) -> str:
    return " ".join(str(err).split()) or type(err).__name__
