"""Data sets held as tensors or as uint8 pixels (the built-in sets, feature files) and the
splits every data set is loaded as."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
from torch.utils.data import Dataset

from bench.data.splits import make_splits, training_classes_first

PIXEL_BLOCK = 4096  # uint8 images made float at once for `PixelImages.inputs`


class TensorImages(Dataset):
    """Images already in memory; items are (image, label, index in this split). `queries`, in
    a test split searched in a gallery, flags each item that is a query."""

    def __init__(self, images: torch.Tensor, labels: np.ndarray, shift: int = 0):
        self.images = images
        self.labels = np.asarray(labels, dtype=np.int64)
        self.shift = shift
        self.queries: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.labels)

    def tensor_at(self, i: int) -> torch.Tensor:
        # (not `image`: that is a split's displayable pixels, bench.report.gallery_images)
        return self.images[i]

    def __getitem__(self, i: int):
        image = self.tensor_at(i)
        if self.shift:
            image = random_shift(image, self.shift)
        return image, int(self.labels[i]), i

    def inputs(self) -> np.ndarray:
        """The raw inputs, flattened: the untrained baseline's embedding."""
        return self.images.reshape(len(self.images), -1).numpy()


class PixelImages(TensorImages):
    """Rows of uint8 pixels, a memory-mapped cache, as images in [0, 1]: (N, H, W) one-channel
    (glyphs), (N, H, W, 3) RGB (emoji); made float an item at a time, so that no split copies
    the set, nor holds it as floats."""

    def __init__(self, pixels: np.ndarray, rows: np.ndarray, labels: np.ndarray, shift: int = 0):
        super().__init__(pixels, labels, shift)
        self.rows = np.asarray(rows, dtype=np.int64)

    def tensor_at(self, i: int) -> torch.Tensor:
        image = torch.from_numpy(self.images[self.rows[i]].astype(np.float32) / 255.0)
        return image.permute(2, 0, 1) if image.ndim == 3 else image[None]

    def inputs(self) -> np.ndarray:
        out = np.empty((len(self.rows), int(np.prod(self.images.shape[1:]))), np.float32)
        for start in range(0, len(out), PIXEL_BLOCK):
            rows = self.rows[start : start + PIXEL_BLOCK]
            pixels = self.images[rows].reshape(len(rows), -1)
            out[start : start + len(rows)] = pixels.astype(np.float32) / 255.0
        return out

    def __getstate__(self):
        # A memory map is pickled (for a loader's spawned workers) as where it lies, not whole.
        state = dict(self.__dict__)
        if isinstance(self.images, np.memmap):
            m = self.images
            state["images"] = (m.filename, m.offset, m.shape, m.dtype.str)
        return state

    def __setstate__(self, state: dict) -> None:
        if isinstance(state["images"], tuple):
            filename, offset, shape, dtype = state["images"]
            state["images"] = np.memmap(filename, np.dtype(dtype), "r", offset, shape)
        self.__dict__.update(state)


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
    unseen: Dataset | None = None  # pairs protocol: test images of the unseen classes
    class_names: tuple[str, ...] = ()
    # The packages the data came from and their versions (the emoji sets: their npm packages),
    # recorded beside the harness's own in each run's config.json.
    packages: dict[str, str] = field(default_factory=dict)
    # What a figure that shows its images must credit (the emoji sets and their licences).
    credits: str = ""
    # The shape the run's network is given, e.g. "3x224x224" for a timm ViT on 28-px glyphs
    # (it resizes them): set by bench.train.loaders.load_data; "" for the items' own shape.
    network_input: str = ""


def tensor_splits(
    name: str,
    images: torch.Tensor,
    labels: np.ndarray,
    protocol: str,
    val_fraction: float,
    train_per_class: int = 0,
    val_split: str = "images",
    shift: int = 0,
    names: Sequence[str] = (),
    published: np.ndarray | None = None,
) -> DataSplits:
    """Images held in memory (N, C, H, W), or uint8 pixels (N, H, W[, C]) each split takes rows
    of (`PixelImages`), split by the protocol; training images shifted by up to `shift` pixels;
    `names`: the classes' names by label (else their numbers); `published`: each image's
    status where the data set gives one (its queries: "query")."""
    table = pd.DataFrame({"label": labels, "split": "" if published is None else published})
    splits = make_splits(protocol, table, val_fraction, train_per_class, val_split)
    classes = np.unique(labels)
    labels, order = training_classes_first(labels, splits.train)

    def part(rows: np.ndarray, shift: int = 0) -> TensorImages:
        if isinstance(images, np.ndarray):
            return PixelImages(images, rows, labels[rows], shift=shift)
        return TensorImages(images[rows], labels[rows], shift=shift)

    test = part(splits.test)
    if len(splits.queries):
        test.queries = np.asarray(splits.queries, dtype=bool)
    return DataSplits(
        name=name,
        train=part(splits.train, shift=shift),
        train_eval=part(splits.train),
        val=part(splits.val),
        test=test,
        in_channels=pixel_channels(images) if isinstance(images, np.ndarray) else images.shape[1],
        num_train_classes=len(np.unique(labels[splits.train])),
        unseen=part(splits.unseen) if len(splits.unseen) else None,
        class_names=tuple(str(names[c] if len(names) else c) for c in classes[order]),
    )


def pixel_channels(pixels: np.ndarray) -> int:
    """The channels of (N, H, W) or (N, H, W, C) uint8 pixels."""
    return pixels.shape[3] if pixels.ndim == 4 else 1
