"""Images decoded once into a cache of pre-resized uint8 arrays, served with the protocols'
transforms.

Decoding a JPEG costs more than a small network's step on the CPU, so every image is decoded,
cropped (to its bounding box where the protocol says so) and resized once, into a memory-mapped
`.npy` file beside the data; later epochs read raw pixels from it.
"""

from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset
from torchvision.transforms import v2
from tqdm import tqdm

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
RAW_SIDE = 32  # the raw-inputs baseline of an image data set: pixels area-averaged to this side


def to_rgb(img: Image.Image) -> Image.Image:
    """8-bit RGB. 16-bit greyscale (Pillow's modes I;16* and I, as it opens 16-bit PNGs) is
    scaled from 0-65535 to 0-255, where Pillow's convert would clip it at 255."""
    if not img.mode.startswith("I"):
        return img.convert("RGB")
    grey = np.asarray(img, dtype=np.float64) / 65535
    return Image.fromarray(np.round(np.clip(grey, 0, 1) * 255).astype(np.uint8)).convert("RGB")


def load_image(path: str, box: tuple[float, float, float, float] | None, size: int) -> np.ndarray:
    """RGB pixels of one image, cropped to `box` (x1, y1, x2, y2) if given, resized to size^2."""
    with Image.open(path) as img:
        img = to_rgb(img)
        if box is not None:
            x1, y1, x2, y2 = box
            x1, y1 = max(0, int(x1)), max(0, int(y1))
            x2, y2 = min(img.width, int(np.ceil(x2))), min(img.height, int(np.ceil(y2)))
            if x2 > x1 and y2 > y1:
                img = img.crop((x1, y1, x2, y2))
        return np.array(img.resize((size, size), Image.BILINEAR), dtype=np.uint8)


def cache_key(paths: list[str], boxes: list | None, size: int) -> str:
    items = {"size": size, "paths": paths, "boxes": boxes}
    return hashlib.sha1(json.dumps(items).encode()).hexdigest()[:16]


def build_cache(
    paths: list[str], boxes: list | None, size: int, cache_dir: Path, workers: int | None = None
) -> Path:
    """The cache file of these images at this size, decoding them only if it does not exist.

    Written under a temporary name and renamed when complete, so a killed build is never used.
    """
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    out = cache_dir / f"images-{size}-{cache_key(paths, boxes, size)}.npy"
    if out.is_file():
        return out
    tmp = cache_dir / f".{out.stem}.{os.getpid()}.tmp.npy"
    array = np.lib.format.open_memmap(
        tmp, mode="w+", dtype=np.uint8, shape=(len(paths), size, size, 3)
    )
    jobs = zip(paths, boxes or [None] * len(paths), strict=True)
    with ThreadPoolExecutor(workers or os.cpu_count() or 1) as pool:
        decoded = pool.map(lambda job: load_image(job[0], job[1], size), jobs)
        for i, pixels in enumerate(
            tqdm(decoded, total=len(paths), desc=f"caching {size}px", disable=len(paths) < 500)
        ):
            array[i] = pixels
    array.flush()
    del array
    os.replace(tmp, out)
    return out


def train_transform(crop: int, flip: bool = True, pad: int = 0) -> v2.Compose:
    """Random crop (from the zero-padded image if `pad`), horizontal mirror, ImageNet scaling."""
    steps = [v2.RandomCrop(crop, padding=pad or None)]
    if flip:
        steps.append(v2.RandomHorizontalFlip())
    return v2.Compose([*steps, *to_float()])


def eval_transform(crop: int) -> v2.Compose:
    return v2.Compose([v2.CenterCrop(crop), *to_float()])


def to_float() -> list:
    return [v2.ToDtype(torch.float32, scale=True), v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)]


class CachedImages(Dataset):
    """Rows of an image cache as (transformed image, label, index in this split) items."""

    def __init__(self, cache: Path, rows: np.ndarray, labels: np.ndarray, transform):
        self.cache = Path(cache)
        self.rows = np.asarray(rows, dtype=np.int64)
        self.labels = np.asarray(labels, dtype=np.int64)
        self.transform = transform
        self._array = None  # opened lazily, once per DataLoader worker

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int):
        if self._array is None:
            self._array = np.load(self.cache, mmap_mode="r")
        pixels = torch.from_numpy(np.array(self._array[self.rows[i]])).permute(2, 0, 1)
        return self.transform(pixels), int(self.labels[i]), i

    def inputs(self, side: int = RAW_SIDE, chunk: int = 256) -> np.ndarray:
        """The cached pixels in [0, 1], area-averaged to at most side x side, flattened: the
        raw-inputs baseline (a 224-pixel image as given would have 150,528 dimensions)."""
        array = np.load(self.cache, mmap_mode="r")
        parts = []
        for start in range(0, len(self.rows), chunk):
            pixels = torch.from_numpy(np.array(array[self.rows[start : start + chunk]]))
            pixels = pixels.permute(0, 3, 1, 2).float() / 255
            if pixels.shape[-1] > side:
                pixels = torch.nn.functional.interpolate(pixels, size=(side, side), mode="area")
            parts.append(pixels.flatten(1).numpy())
        return np.concatenate(parts) if parts else np.zeros((0, 3 * side * side), np.float32)

    def __getstate__(self):
        return {**self.__dict__, "_array": None}
