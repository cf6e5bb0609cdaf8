"""Cached features of a frozen backbone (seed 002's CNN features), and loading them back.

A features file is an .npz with `features` (N x F float32), `labels` (N int64) and `split`
(N strings, each "train", "val" or "test"). `load_features("digits")` gives the raw 8x8 pixels
of the digits protocol instead, so that the feature methods run without any extraction.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from bench import store
from bench.config import FEATURES_PREFIX, make_configs, safe_name
from bench.data import DataSplits

SPLITS = ("train", "val", "test")
FORMAT = (
    "expected an .npz with arrays features (N x F floats), labels (N integers) and split "
    "(N strings, each 'train', 'val' or 'test')"
)
FEATURES_DIR = Path("results") / "features"


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


def digits_features(protocol: str = "metric") -> FeatureSplits:
    """The raw pixels (64 values in [0, 1]) of digits: under the metric protocol classes 0-4
    train (20 % of them validation), 5-9 test; under classify every class in every split."""
    from bench.data import load_dataset

    data = load_dataset("digits", protocol)
    parts = []
    for split in (data.train_eval, data.val, data.test):
        parts += [split.inputs().astype(np.float32), np.asarray(split.labels, dtype=np.int64)]
    return FeatureSplits("digits", *parts)


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


def load_features(
    dataset: str, data_root: Path | None = None, protocol: str = "metric"
) -> FeatureSplits:
    """`digits` (raw pixels, split by `protocol`) or `features:PATH.npz` (a file of
    `nngk-bench features`, or the user's own, with its own split) as train / val / test
    feature splits. `data_root` is for data sets read from images, none served here yet."""
    if dataset == "digits":
        return digits_features(protocol)
    if dataset.startswith(FEATURES_PREFIX):
        path = Path(dataset[len(FEATURES_PREFIX) :])
        return _from_split_array(dataset, *read_features_file(path))
    raise ValueError(
        f"no features for {dataset!r}; expected 'digits' or '{FEATURES_PREFIX}PATH.npz' "
        f"(extract them with `nngk-bench features --dataset {dataset}`)"
    )


def default_features_path(dataset: str, protocol: str, backbone: str, pretrained: str) -> Path:
    weights = safe_name(
        Path(pretrained).stem if pretrained not in ("imagenet", "none") else pretrained
    )
    return FEATURES_DIR / f"{safe_name(dataset)}-{protocol}-{backbone}-{weights}.npz"


def _split_features(model: torch.nn.Module, data: DataSplits, device: torch.device):
    from bench.trainer import embed

    for name, split in zip(SPLITS, (data.train_eval, data.val, data.test), strict=True):
        if len(split) == 0:
            continue
        feats, labels = embed(model, split, device, features=True)
        # VGG16's and AlexNet's backbone output is FC7 before its ReLU; seed 002 uses it after.
        # The other backbones end in a ReLU or a pool of one, where this changes nothing.
        yield torch.relu(feats).numpy(), labels, np.full(len(labels), name)


def extract_features(
    dataset: str,
    backbone: str = "vgg16",
    pretrained: str = "imagenet",
    protocol: str = "metric",
    data_root: str | None = None,
    device: torch.device | None = None,
    seed: int = 0,
    **overrides,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(features, labels, split) of every image of a data set under a protocol, through a
    frozen backbone in evaluation mode; images are loaded as the protocol's preset says
    (`overrides`, e.g. resize and crop, replace its values)."""
    from bench.backbones import build_model
    from bench.trainer import default_device, load_data, seed_everything

    (cfg,) = make_configs(
        dataset,
        "features",
        (1,),
        {},
        protocol=protocol,
        backbone=backbone,
        pretrained=pretrained,
        data_root=data_root,
        seed=seed,
        **overrides,
    )
    data = load_data(cfg)
    seed_everything(seed)  # the random initialisation of pretrained="none"
    device = device or default_device()
    model = build_model(backbone, 1, pretrained, data.in_channels).to(device)
    parts = list(_split_features(model, data, device))
    return tuple(np.concatenate(arrays) for arrays in zip(*parts, strict=True))


def write_features(path: Path, features: np.ndarray, labels: np.ndarray, split: np.ndarray):
    store.atomic_save_npz(
        Path(path),
        features=features.astype(np.float32),
        labels=labels.astype(np.int64),
        split=split.astype(str),
    )
