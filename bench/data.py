"""Data sets as train / validation / test splits of (image, label, index) items."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import Dataset

SPLIT_SEED = 0  # the validation split is the same for every run seed


class TensorImages(Dataset):
    """Images already in memory; items are (image, label, index in this split)."""

    def __init__(self, images: torch.Tensor, labels: np.ndarray, shift: int = 0):
        self.images = images
        self.labels = np.asarray(labels, dtype=np.int64)
        self.shift = shift

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        image = self.images[i]
        if self.shift:
            image = random_shift(image, self.shift)
        return image, int(self.labels[i]), i

    def inputs(self) -> np.ndarray:
        """The raw inputs, flattened: the untrained baseline's embedding."""
        return self.images.reshape(len(self.images), -1).numpy()


def random_shift(image: torch.Tensor, shift: int) -> torch.Tensor:
    """Translate by up to `shift` pixels each way, zero-filled (the small-image random crop)."""
    h, w = image.shape[-2:]
    padded = torch.nn.functional.pad(image, (shift, shift, shift, shift))
    dy, dx = torch.randint(0, 2 * shift + 1, (2,)).tolist()
    return padded[..., dy : dy + h, dx : dx + w]


@dataclass
class DataSplits:
    name: str
    train: Dataset  # training transform (augmentation, if any)
    train_eval: Dataset  # the same items with the deterministic evaluation transform
    val: Dataset
    test: Dataset
    in_channels: int
    num_train_classes: int


def contiguous(labels: np.ndarray) -> np.ndarray:
    """Labels renumbered 0..C-1 in sorted order of the original class ids."""
    return np.unique(labels, return_inverse=True)[1].astype(np.int64)


def carve_validation(labels: np.ndarray, fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """Stratified (train, validation) positions within a training split, fixed seed."""
    positions = np.arange(len(labels))
    if fraction <= 0:
        return positions, positions[:0]
    train, val = train_test_split(
        positions, test_size=fraction, stratify=labels, random_state=SPLIT_SEED
    )
    return np.sort(train), np.sort(val)


def digits(val_fraction: float = 0.2, **_) -> DataSplits:
    """scikit-learn's 8x8 digits; metric-learning protocol: classes 0-4 train, 5-9 test."""
    data = load_digits()
    images = torch.from_numpy(data.images.astype(np.float32) / 16.0).unsqueeze(1)
    labels = data.target.astype(np.int64)
    train_all = np.nonzero(labels < 5)[0]
    test = np.nonzero(labels >= 5)[0]
    tr, va = carve_validation(labels[train_all], val_fraction)
    train_idx, val_idx = train_all[tr], train_all[va]
    train_labels = contiguous(labels[train_idx])
    return DataSplits(
        name="digits",
        train=TensorImages(images[train_idx], train_labels, shift=1),
        train_eval=TensorImages(images[train_idx], train_labels),
        val=TensorImages(images[val_idx], contiguous(labels[val_idx])),
        test=TensorImages(images[test], contiguous(labels[test])),
        in_channels=1,
        num_train_classes=5,
    )


DATASETS: dict[str, Callable[..., DataSplits]] = {"digits": digits}


def dataset_names() -> list[str]:
    return sorted(DATASETS)


def check_dataset(name: str) -> None:
    if name not in DATASETS:
        raise ValueError(
            f"unknown data set {name!r}; expected one of: {', '.join(dataset_names())}"
        )


def load_dataset(name: str, val_fraction: float = 0.2) -> DataSplits:
    check_dataset(name)
    return DATASETS[name](val_fraction=val_fraction)
