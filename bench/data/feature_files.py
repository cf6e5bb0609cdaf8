"""Feature files: arrays of feature vectors with labels and splits, checked on reading.

A features file is an .npz with `features` (N x F float32), `labels` (N int64) and `split`
(N strings, each "train", "val" or "test")."""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.data.names import FEATURES_PREFIX
from bench.util.atomic import atomic_save_npz

SPLITS = ("train", "val", "test")
FORMAT = (
    "expected an .npz with arrays features (N x F floats), labels (N integers) and split "
    "(N strings, each 'train', 'val' or 'test')"
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
        """Training and validation together: what seed 002 trains its methods on."""
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


def read_features_file(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(features, labels, split) of a features file, checked; a one-line ValueError if not."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise _bad(path, "no such file")
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {key: npz[key] for key in npz.files}
    except (OSError, ValueError, zipfile.BadZipFile) as err:
        raise _bad(path, f"not a readable .npz ({' '.join(str(err).split())})") from None
    missing = [key for key in ("features", "labels", "split") if key not in arrays]
    if missing:
        raise _bad(path, f"missing array {', '.join(missing)}")
    features, labels, split = arrays["features"], arrays["labels"], arrays["split"]
    if features.ndim != 2 or not np.issubdtype(features.dtype, np.number):
        raise _bad(path, f"features has shape {features.shape} and dtype {features.dtype}")
    if not np.isfinite(features).all():
        raise _bad(path, "features has NaN or infinite values")
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
    return features.astype(np.float32), labels.astype(np.int64), split


def write_features(path: Path, features: np.ndarray, labels: np.ndarray, split: np.ndarray):
    atomic_save_npz(
        Path(path),
        features=features.astype(np.float32),
        labels=labels.astype(np.int64),
        split=split.astype(str),
    )


def load_feature_file(dataset: str) -> FeatureSplits:
    """`features:PATH.npz` as train / val / test feature splits (the file's own split)."""
    path = Path(dataset[len(FEATURES_PREFIX) :])
    return _from_split_array(dataset, *read_features_file(path))
