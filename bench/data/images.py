"""Cached images as a data set: items are uint8 pixels as cached, batches are padded together
(`collate`) and cropped into the network's input where the batch is used (`prepare`, on the
GPU when training runs there), so the loader's workers only copy bytes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from bench.data.crops import Crops, RaggedBatch, pad_batch
from bench.data.image_cache import read_cache

RAW_SIDE = 32  # the raw-inputs baseline of an image data set: pixels area-averaged to this side


def collate_images(items: list) -> tuple[RaggedBatch, torch.Tensor, torch.Tensor]:
    """(images, labels, indices) of a batch of CachedImages items. The labels, indices and
    sizes are contiguous views of one int64 tensor, so that a loader's worker hands a batch
    over as two tensors: each costs the thread receiving it a socket handshake for its file
    descriptor, holding the GIL the training step needs (docs/speed.md)."""
    images, labels, indices = zip(*items, strict=True)
    batch, b = pad_batch(list(images)), len(images)
    ints = torch.tensor([*labels, *indices], dtype=torch.int64)
    meta = torch.cat([ints, batch.sizes.flatten()])
    return RaggedBatch(batch.pixels, meta[2 * b :].view(b, 2)), meta[:b], meta[b : 2 * b]


class CachedImages(Dataset):
    """Rows of an image cache as (uint8 (3, h, w) pixels, label, index in this split) items,
    made into the network's input a batch at a time by `crops`."""

    deterministic_items = True  # no randomness in a worker: loaders may keep their workers
    collate = staticmethod(collate_images)

    def __init__(self, cache: Path, rows: np.ndarray, labels: np.ndarray, crops: Crops):
        self.cache = Path(cache)
        self.rows = np.asarray(rows, dtype=np.int64)
        self.labels = np.asarray(labels, dtype=np.int64)
        self.crops = crops
        self._opened = None  # (pixels, sizes, offsets), once per DataLoader worker

    def __len__(self) -> int:
        return len(self.rows)

    def opened(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The cache's (pixels, sizes, offsets), read once per DataLoader worker."""
        if self._opened is None:
            self._opened = read_cache(self.cache)
        return self._opened

    def image(self, i: int) -> np.ndarray:
        """The cached (h, w, 3) uint8 pixels of item i."""
        pixels, sizes, offsets = self.opened()
        row = self.rows[i]
        h, w = sizes[row]
        return np.array(pixels[offsets[row] : offsets[row + 1]]).reshape(h, w, 3)

    def __getitem__(self, i: int):
        return torch.from_numpy(self.image(i)).permute(2, 0, 1), int(self.labels[i]), i

    def prepare(self, batch: RaggedBatch, generator: torch.Generator | None = None):
        """The network's input from a collated batch, on the batch's device."""
        return self.crops(batch, generator)

    def inputs(self, side: int = RAW_SIDE) -> np.ndarray:
        """The cached pixels in [0, 1], the image stretched to a square and area-averaged to at
        most side x side, flattened: the raw-inputs baseline (a 224-pixel image as given would
        have 150,528 dimensions). The square is no larger than the cache's images (their
        shorter side), and the same for every image and split of the cache, an image too
        elongated to have that shorter side (`image_cache.MAX_ASPECT`) included."""
        size = min(side, int(self.opened()[1].min(axis=1).max(initial=1)))
        parts = []
        for i in range(len(self)):
            pixels = torch.from_numpy(self.image(i)).permute(2, 0, 1)[None].float() / 255
            pixels = torch.nn.functional.interpolate(pixels, size=(size, size), mode="area")
            parts.append(pixels.flatten(1).numpy())
        return np.concatenate(parts) if parts else np.zeros((0, 3 * size * size), np.float32)

    def __getstate__(self):
        return {**self.__dict__, "_opened": None}
