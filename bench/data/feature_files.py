"""Feature files: arrays of feature vectors with labels and splits, checked on reading.

A features file is an .npz with `features` (N x F float32), `labels` (N int64) and `split`
(N strings, each "train", "val" or "test"); `nngk-bench features` adds `source`, a JSON string
of the data set and settings they were extracted with."""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.data.names import FEATURES_PREFIX

SPLITS = ("train", "val", "test")
ARRAYS = ("features", "labels", "split")
# The largest |feature| whose squares, 2^20 of them summed, stay finite in float32 (1.8e16).
LARGEST_FEATURE = float(np.sqrt(np.finfo(np.float32).max / 2**20))
FORMAT = (
    "expected an .npz with arrays features (N x F floats, F >= 1), labels (N integers) and "
    "split (N strings, each 'train', 'val' or 'test'), as `nngk-bench features` writes it"
)


@dataclass(frozen=True)
class FeatureSplits:
    """Feature vectors and labels of the train, validation and test splits of a data set."""

    name: str
    train: np.ndarray
    train_labels: np.ndarray
    val: np.ndarray
    val_labels: np.ndarray
    test: np.ndarray
    test_labels: np.ndarray

    @property
    def dims(self) -> int:
        return self.train.shape[1]

    def train_val(self) -> tuple[np.ndarray, np.ndarray]:
        """Training and validation together: what Sharma et al. 2015 trains its methods on."""
        return (
            np.concatenate([self.train, self.val]),
            np.concatenate([self.train_labels, self.val_labels]),
        )


def _from_split_array(
    name: str, features: np.ndarray, labels: np.ndarray, split: np.ndarray
) -> FeatureSplits:
    parts = []
    for which in SPLITS:
        rows = split == which
        parts += [features[rows], labels[rows]]
    return FeatureSplits(name, *parts)


def _bad(path: Path, problem: str) -> ValueError:
    return ValueError(f"{path}: {problem}; {FORMAT}")


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def read_features_file(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(features, labels, split) of a features file, checked; a one-line ValueError if not."""
    path = Path(path).expanduser()
    arrays = _read_arrays(path)
    features = _checked_features(path, arrays["features"])
    labels, split = arrays["labels"], arrays["split"]
    n = len(features)
    if labels.shape != (n,) or not np.issubdtype(labels.dtype, np.integer):
        raise _bad(path, f"labels has shape {labels.shape} and dtype {labels.dtype}, for {n} rows")
    if split.shape != (n,) or split.dtype.kind != "U":
        raise _bad(path, f"split has shape {split.shape} and dtype {split.dtype}, for {n} rows")
    wrong = sorted(set(np.unique(split)) - set(SPLITS))
    if wrong:
        raise _bad(path, f"split has values {', '.join(repr(str(v)) for v in wrong[:5])}")
    for which in ("train", "test"):
        if not (split == which).any():
            raise _bad(path, f"no row has split '{which}'")
    return features, labels.astype(np.int64), split


def check_features_file(path: Path) -> None:
    """A one-line ValueError where `path` is no file or no whole .npz: cheap (numpy's import
    only), so `run` checks it before torch is imported."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise _bad(path, "no such file")
    if not zipfile.is_zipfile(path):  # numpy would try it as a pickle, and say so
        raise _bad(path, "not a readable .npz file (not a whole zip archive of .npy arrays)")


def _read_arrays(path: Path) -> dict[str, np.ndarray]:
    """The file's features, labels and split arrays, as numpy reads them."""
    check_features_file(path)
    try:
        with np.load(path, allow_pickle=False) as npz:
            missing = [key for key in ARRAYS if key not in npz.files]
            if missing:
                raise _bad(path, f"missing array {', '.join(missing)}")
            return {key: _member(path, npz, key) for key in ARRAYS}
    except (OSError, EOFError, zipfile.BadZipFile) as err:
        raise _bad(path, f"not a readable .npz ({_one_line(err)})") from None


def _member(path: Path, npz, key: str) -> np.ndarray:
    try:
        return npz[key]
    except ValueError as err:  # an object array (numpy would unpickle it), or not an .npy
        if "allow_pickle" in str(err):
            raise _bad(path, f"array {key} holds Python objects, not numbers or strings") from None
        raise _bad(path, f"array {key} is not a readable .npy array ({_one_line(err)})") from None


def _checked_features(path: Path, features: np.ndarray) -> np.ndarray:
    """The features as float32, or a one-line error for a shape or values no head can use (with
    0 columns the process would die of a division by zero, SIGFPE, in the first batch)."""
    if features.ndim != 2:
        raise _bad(path, f"features has shape {features.shape}, not (N rows, F columns)")
    if features.shape[1] == 0:
        raise _bad(path, f"features has shape {features.shape}: no feature columns")
    if features.dtype.kind not in "iuf":
        raise _bad(path, f"features has dtype {features.dtype}, not real numbers")
    with np.errstate(over="ignore"):
        as_float32 = features.astype(np.float32)
    bad = ~np.isfinite(as_float32).all(axis=1)
    if bad.any():
        raise _bad(
            path,
            f"features has NaN, infinite or beyond-float32 values in {int(bad.sum())} row(s), "
            f"e.g. row {int(bad.argmax())}",
        )
    return checked_scale(path, as_float32)


def checked_scale(path: Path, features: np.ndarray) -> np.ndarray:
    """A one-line error for features so large that sums of their squares overflow float32
    (finite values of 1e30 made the raw-inputs baseline all zeros, the head collapse)."""
    peak = float(np.abs(features).max(initial=0.0))
    if peak > LARGEST_FEATURE:
        rows = int((np.abs(features) > LARGEST_FEATURE).any(axis=1).sum())
        raise _bad(
            path,
            f"features reach {peak:.3g} in {rows} row(s): beyond {LARGEST_FEATURE:.2g}, a sum "
            "of 2^20 squares (a row's length, a batch's variance, a distance) overflows "
            "float32; scale them down, e.g. divide by their largest value, and save again",
        )
    return features


def write_features(
    path: Path,
    features: np.ndarray,
    labels: np.ndarray,
    split: np.ndarray,
    source: dict | None = None,
) -> None:
    """The arrays into an .npz; `source` (the data set and settings they were extracted with)
    as the JSON string `source`, so that a later `features --out` onto the file can tell whose
    it is. Readers take only the three arrays."""
    from bench.util.atomic import atomic_save_npz  # imports torch: `run` reads this module first

    text = json.dumps(source, sort_keys=True, default=str)
    recorded = {"source": np.array(text)} if source else {}
    atomic_save_npz(
        Path(path),
        features=features.astype(np.float32),
        labels=labels.astype(np.int64),
        split=split.astype(str),
        **recorded,
    )


def features_source(path: Path) -> dict | None:
    """The data set and settings a features file records it was extracted with; None where it
    records none (written before they were recorded, or by other means) or cannot be read."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            if "source" not in npz.files:
                return None
            return json.loads(str(npz["source"]))
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        return None


def load_feature_file(dataset: str) -> FeatureSplits:
    """`features:PATH.npz` as train / val / test feature splits (the file's own split)."""
    path = Path(dataset[len(FEATURES_PREFIX) :])
    return _from_split_array(dataset, *read_features_file(path))
