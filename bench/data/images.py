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

from bench.util.progress import log

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
MAX_PIXELS_VARIABLE = "NNGK_MAX_IMAGE_PIXELS"
RAW_SIDE = 32  # the raw-inputs baseline of an image data set: pixels area-averaged to this side


def to_rgb(img: Image.Image) -> Image.Image:
    """8-bit RGB. 16-bit greyscale (Pillow's modes I;16* and I, as it opens 16-bit PNGs) is
    scaled from 0-65535 to 0-255, where Pillow's convert would clip it at 255."""
    if not img.mode.startswith("I"):
        return img.convert("RGB")
    grey = np.asarray(img, dtype=np.float64) / 65535
    return Image.fromarray(np.round(np.clip(grey, 0, 1) * 255).astype(np.uint8)).convert("RGB")


def load_image(path: str, box: tuple[float, float, float, float] | None, size: int) -> np.ndarray:
    """RGB pixels of one image, cropped to `box` (x1, y1, x2, y2) if given, resized to size^2;
    a one-line ValueError naming the file when it cannot be decoded."""
    try:
        with Image.open(path) as img:
            img = to_rgb(img)
            if box is not None:
                x1, y1, x2, y2 = box
                x1, y1 = max(0, int(x1)), max(0, int(y1))
                x2, y2 = min(img.width, int(np.ceil(x2))), min(img.height, int(np.ceil(y2)))
                if x2 > x1 and y2 > y1:
                    img = img.crop((x1, y1, x2, y2))
            return np.array(img.resize((size, size), Image.BILINEAR), dtype=np.uint8)
    except Image.DecompressionBombError as err:
        raise ValueError(
            f"{path}: {str(err).splitlines()[0]}; if you trust the file, allow larger images "
            f"with {MAX_PIXELS_VARIABLE}=N pixels (0: no limit)"
        ) from None
    except (OSError, SyntaxError) as err:  # Pillow: truncated, unidentified or corrupt
        raise ValueError(
            f"{path}: cannot decode the image ({str(err).splitlines()[0]}); replace or remove it"
        ) from None


def allow_large_images() -> None:
    """Pillow's decompression-bomb limit, from $NNGK_MAX_IMAGE_PIXELS where set (0: none)."""
    value = os.environ.get(MAX_PIXELS_VARIABLE)
    if value is None:
        return
    try:
        pixels = int(value)
    except ValueError:
        raise ValueError(f"{MAX_PIXELS_VARIABLE}={value!r} is not a number of pixels") from None
    Image.MAX_IMAGE_PIXELS = pixels or None


def file_stats(paths: list[str]) -> list[tuple[int, int]]:
    """(size, modification time in ns) of each file; a missing file is a one-line error."""
    stats = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError as err:
            raise ValueError(f"{path}: {err.strerror}; the data set lists it") from None
        stats.append((st.st_size, st.st_mtime_ns))
    return stats


def cache_key(paths: list[str], boxes: list | None, size: int) -> str:
    """Names the cache of these images at this size; their sizes and modification times are
    part of it, so a replaced image makes a new cache."""
    items = {"size": size, "paths": paths, "boxes": boxes, "stats": file_stats(paths)}
    return hashlib.sha1(json.dumps(items).encode()).hexdigest()[:16]


def valid_cache(path: Path, count: int, size: int) -> bool:
    """Whether a cache file holds `count` uint8 images of size x size x 3 and is whole."""
    try:
        array = np.load(path, mmap_mode="r")
    except (OSError, ValueError, EOFError):
        return False
    return array.dtype == np.uint8 and array.shape == (count, size, size, 3)


def remove_stale_parts(cache_dir: Path) -> None:
    """Half-built caches (`.NAME.PID.tmp.npy`) of processes that no longer run."""
    for part in Path(cache_dir).glob(".images-*.tmp.npy"):
        pid = part.name.split(".")[-3]
        if pid.isdigit() and not process_alive(int(pid)):
            part.unlink(missing_ok=True)


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def build_cache(
    paths: list[str], boxes: list | None, size: int, cache_dir: Path, workers: int | None = None
) -> Path:
    """The cache file of these images at this size, decoding them only if it does not exist
    whole (an invalid one is rebuilt).

    Written under a temporary name and renamed when complete, so a killed build is never used;
    a failed build removes its part, and parts of dead processes are removed on the next start.
    """
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    out = cache_dir / f"images-{size}-{cache_key(paths, boxes, size)}.npy"
    if out.is_file():
        if valid_cache(out, len(paths), size):
            return out
        log.warning(f"{out}: not a whole cache of {len(paths)} images at {size}px; rebuilding it")
    remove_stale_parts(cache_dir)
    allow_large_images()
    tmp = cache_dir / f".{out.stem}.{os.getpid()}.tmp.npy"
    try:
        fill_cache(tmp, paths, boxes, size, workers)
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return out


def fill_cache(tmp: Path, paths: list[str], boxes: list | None, size: int, workers) -> None:
    """Decode every image into a new .npy file, its space reserved first: a full disk is an
    OSError here, not a crash (SIGBUS) while writing into the memory map."""
    array = np.lib.format.open_memmap(
        tmp, mode="w+", dtype=np.uint8, shape=(len(paths), size, size, 3)
    )
    with open(tmp, "r+b") as f:
        try:  # (no posix_fallocate on macOS: there the build fails later, if at all)
            if hasattr(os, "posix_fallocate"):
                os.posix_fallocate(f.fileno(), 0, os.path.getsize(tmp))
        except OSError as err:
            raise OSError(err.errno, err.strerror, str(tmp)) from None
    jobs = zip(paths, boxes or [None] * len(paths), strict=True)
    with ThreadPoolExecutor(workers or os.cpu_count() or 1) as pool:
        decoded = pool.map(lambda job: load_image(job[0], job[1], size), jobs)
        for i, pixels in enumerate(
            tqdm(decoded, total=len(paths), desc=f"caching {size}px", disable=len(paths) < 500)
        ):
            array[i] = pixels
    array.flush()
    del array


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
