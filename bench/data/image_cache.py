"""Images decoded once into a cache of resized uint8 pixels.

Decoding a JPEG costs more than a small network's step on the CPU, so every image is decoded,
cropped (to its bounding box where the protocol says so) and resized once, its shorter side to
the protocol's size and its aspect ratio kept, into a memory-mapped `.npy` file in the cache
folder (`images_cache_dir`; never in the user's data folder); later epochs read raw pixels from
it (`bench.data.images`), and crops are made per batch (`bench.data.crops`). The images differ
in shape, so the file holds them one after another, flat, and a second small file
(`.sizes.npy`) their heights and widths.

The longer side is at most MAX_ASPECT times the size, as torchvision's Resize(size,
max_size=MAX_ASPECT * size) gives it: an image more elongated than that has its shorter side
below the size. A batch's canvas is then bounded by the batch size and the size alone
(`bench.data.crops`), where a 1x200 strip would otherwise be cached 200 sizes long.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
from PIL import Image
from tqdm import tqdm

from bench.data.cache_times import CacheTimes, usable_cpus
from bench.util.environ import cache_setting
from bench.util.names import safe_name
from bench.util.progress import log

MAX_PIXELS_VARIABLE = "NNGK_MAX_IMAGE_PIXELS"
MAX_ASPECT = 4  # the longer side is at most this many times the size (Resize's max_size)
# 1: every image squashed to size x size; 2: shorter side to size, ragged; 3: and the longer side
# at most MAX_ASPECT x size; 4: float and 32-bit greyscale scaled by their range (`grey_scale`)
CACHE_FORMAT = 4


def to_rgb(img: Image.Image) -> Image.Image:
    """8-bit RGB. Greyscale of more than 8 bits, integer (Pillow's modes I;16* and I, as it
    opens 16-bit PNGs and TIFFs) or float (mode F), where Pillow's convert would clip it at
    255 or truncate 0.5 to 0, is scaled by the range its values lie in (`grey_scale`)."""
    if not img.mode.startswith(("I", "F")):
        return img.convert("RGB")
    grey = np.asarray(img, dtype=np.float64)
    grey = grey / grey_scale(img.mode, grey)
    return Image.fromarray(np.round(np.clip(grey, 0, 1) * 255).astype(np.uint8)).convert("RGB")


def grey_scale(mode: str, grey: np.ndarray) -> float:
    """The value that is white: 65535 for 16-bit modes (I;16*); for 32-bit ones (I, F), which
    name no range, the least of 1 (floats in 0-1, mode F only), 255 and 65535 that the image's
    largest value does not exceed (its own maximum beyond those)."""
    if mode.startswith("I;16"):
        return 65535.0
    top = float(np.nanmax(grey)) if grey.size else 0.0
    ranges = ((1.0,) if mode == "F" else ()) + (255.0, 65535.0)
    return next((r for r in ranges if top <= r), max(top, 1.0))


def load_image(path: str, box: tuple[float, float, float, float] | None, size: int) -> np.ndarray:
    """RGB pixels of one image, cropped to `box` (x1, y1, x2, y2) if given, resized so that its
    shorter side is `size` (aspect ratio kept, the longer side at most MAX_ASPECT x size); a
    one-line ValueError naming the file when it cannot be decoded."""
    with opened(path) as img:
        img = to_rgb(img)
        region = box_region(img.size, box)
        if region is not None:
            img = img.crop(region)
        return np.array(img.resize(resized_size(img.size, size), Image.BILINEAR))


def cached_shape(path: str, box: tuple[float, float, float, float] | None, size: int):
    """(height, width) that `load_image` will give, read from the file's header alone, and
    whether the image has a box that lies outside it (the whole image is then taken)."""
    with opened(path) as img:
        region = box_region(img.size, box)
        width_height = (
            img.size if region is None else (region[2] - region[0], region[3] - region[1])
        )
        w, h = resized_size(width_height, size)
        return h, w, box is not None and region is None


@contextmanager
def opened(path: str):
    """A Pillow image; its errors as one-line ValueErrors naming the file and what to do."""
    try:
        with Image.open(path) as img:
            yield img
    except Image.DecompressionBombError as err:
        raise ValueError(
            f"{path}: {str(err).splitlines()[0]}; if you trust the file, allow larger images "
            f"with {MAX_PIXELS_VARIABLE}=N pixels (0: no limit)"
        ) from None
    except (OSError, SyntaxError) as err:  # Pillow: truncated, unidentified or corrupt
        raise ValueError(
            f"{path}: cannot decode the image ({str(err).splitlines()[0]}); replace or remove it"
        ) from None


def box_region(width_height: tuple[int, int], box) -> tuple[int, int, int, int] | None:
    """The whole-pixel region of a bounding box inside the image; None: the whole image (no
    box, or one with no area inside the image)."""
    if box is None:
        return None
    x1, y1, x2, y2 = box
    x1, y1 = max(0, int(x1)), max(0, int(y1))
    x2, y2 = min(width_height[0], int(np.ceil(x2))), min(width_height[1], int(np.ceil(y2)))
    return (x1, y1, x2, y2) if x2 > x1 and y2 > y1 else None


def resized_size(width_height: tuple[int, int], size: int) -> tuple[int, int]:
    """(width, height) with the shorter side `size` and the same aspect ratio, rounded; where
    the longer side would then exceed MAX_ASPECT x size, the longer side that instead."""
    w, h = width_height
    short, long = min(w, h), max(w, h)
    new_short, new_long = size, max(1, round(long * size / short))
    if new_long > MAX_ASPECT * size:
        new_short, new_long = max(1, round(short * MAX_ASPECT * size / long)), MAX_ASPECT * size
    return (new_short, new_long) if w <= h else (new_long, new_short)


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
            link = f" (a link to {os.readlink(path)})" if os.path.islink(path) else ""
            raise ValueError(
                f"{path}: {err.strerror}{link}; the data set holds it: restore it or remove it"
            ) from None
        stats.append((st.st_size, st.st_mtime_ns))
    return stats


def cache_folder() -> Path:
    """$NNGK_CACHE, else the user's cache folder: never the checkout, never a data folder."""
    return cache_setting() or Path.home() / ".cache" / "nngk-bench"


def images_cache_dir(root: Path) -> Path:
    """Where the decoded images of the data under `root` are cached: a folder of the cache
    folder named by `root`'s resolved path (two data folders of one name never share it).
    Nothing is written into the user's data."""
    resolved = Path(root).expanduser().resolve()
    digest = hashlib.sha1(str(resolved).encode()).hexdigest()[:12]
    return cache_folder() / "images" / f"{safe_name(resolved.name or 'root')}-{digest}"


def cache_key(paths: list[str], boxes: list | None, size: int) -> str:
    """Names the cache of these images at this size; their sizes and modification times are
    part of it, so a replaced image makes a new cache."""
    items = {"size": size, "paths": paths, "boxes": boxes, "stats": file_stats(paths)}
    items["format"], items["max_aspect"] = CACHE_FORMAT, MAX_ASPECT
    return hashlib.sha1(json.dumps(items).encode()).hexdigest()[:16]


def sizes_path(cache: Path) -> Path:
    """The file of the images' (height, width) beside a cache file."""
    return Path(cache).with_suffix(".sizes.npy")


def read_cache(cache: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(flat pixels, memory-mapped; (N, 2) heights and widths; N + 1 offsets into the pixels)."""
    sizes = np.load(sizes_path(cache))
    return np.load(cache, mmap_mode="r"), sizes, pixel_offsets(sizes)


def pixel_offsets(sizes: np.ndarray) -> np.ndarray:
    """Where each image of these (N, 2) heights and widths starts in the flat pixels, and where
    the last one ends: N + 1 offsets."""
    return np.concatenate([[0], np.cumsum(sizes[:, 0] * sizes[:, 1] * 3)])


def valid_cache(path: Path, count: int, size: int) -> bool:
    """Whether a cache holds `count` uint8 images of `resized_size`'s sizes and is whole."""
    try:
        pixels, sizes, offsets = read_cache(path)
    except (OSError, ValueError, EOFError):
        return False
    return (
        pixels.dtype == np.uint8
        and sizes.shape == (count, 2)
        and bool(valid_sizes(sizes, size).all())
        and pixels.shape == (offsets[-1],)
    )


def valid_sizes(sizes: np.ndarray, size: int) -> np.ndarray:
    """Which (N, 2) sizes `resized_size` can give: the shorter side `size` and the longer at
    most MAX_ASPECT x size, or the longer side MAX_ASPECT x size and the shorter at most `size`."""
    short, long = sizes.min(axis=1), sizes.max(axis=1)
    cap = MAX_ASPECT * size
    return ((short == size) & (long <= cap)) | ((long == cap) & (short >= 1) & (short <= size))


def remove_stale_parts(cache_dir: Path, pattern: str = ".images-*.tmp.npy") -> None:
    """Half-built caches (`.NAME.PID.tmp.SUFFIX`, matching `pattern`) of processes that no
    longer run."""
    for part in Path(cache_dir).glob(pattern):
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
    log.info(f"caching {len(paths)} images at {size}px into {cache_dir} (once)")
    tmp = cache_dir / f".{out.stem}.{os.getpid()}.tmp.npy"
    tmp_sizes = cache_dir / f".{out.stem}.sizes.{os.getpid()}.tmp.npy"
    try:
        fill_cache(tmp, tmp_sizes, paths, boxes, size, workers)
        os.replace(tmp_sizes, sizes_path(out))  # the sizes first: pixels without them are invalid
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        tmp_sizes.unlink(missing_ok=True)
        raise
    return out


def fill_cache(
    tmp: Path, tmp_sizes: Path, paths: list[str], boxes: list | None, size: int, workers
) -> None:
    """Decode every image into a new .npy file, its space reserved first (the shapes are read
    from the files' headers): a full disk is an OSError here. Each thread writes the images it
    decodes into their places in the file: one thread copying them all would set the pace on
    many cores (on 2 cores it spent 0.6 ms an image copying into a memory map, a tenth of
    decoding one). Logs where the build's seconds went (`CacheTimes`)."""
    jobs = list(zip(paths, boxes or [None] * len(paths), strict=True))
    times = CacheTimes(workers or usable_cpus())
    with ThreadPoolExecutor(times.threads) as pool:
        shapes = list(pool.map(lambda job: tried(cached_shape, job, size), jobs))
    check_all_read(shapes)
    say_whole_images(jobs, [outside for *_, outside in shapes])
    sizes = np.array([shape[:2] for shape in shapes], np.int64).reshape(len(jobs), 2)
    starts = new_pixels_file(tmp, pixel_offsets(sizes))
    times.lap("reading headers and reserving space")
    # The file closes after the pool has shut down: no thread writes to a closed descriptor.
    with open(tmp, "r+b") as file, ThreadPoolExecutor(times.threads) as pool:
        write = partial(write_image, file, times)
        places = [
            (*job, start, shape)
            for job, start, shape in zip(jobs, starts[:-1].tolist(), sizes.tolist(), strict=True)
        ]
        written = pool.map(lambda job: tried(write, job, size), places)
        shown = tqdm(written, total=len(jobs), desc=f"caching {size}px", disable=len(jobs) < 500)
        failed = [result for result in shown if isinstance(result, Unread)]
        times.lap("decoding and writing")
        check_all_read(failed)
        os.fsync(file.fileno())
    np.save(tmp_sizes, sizes)
    times.lap("flushing to disk")
    log.info(times.line(len(paths), size, int(starts[-1] - starts[0])))


def new_pixels_file(path: Path, offsets: np.ndarray) -> np.ndarray:
    """A new .npy file of offsets[-1] uint8 pixels, its disk space reserved; where each of the
    images of these N + 1 `pixel_offsets` starts in it, and where the last one ends, in bytes."""
    array = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint8, shape=(int(offsets[-1]),))
    header = array.offset
    del array
    reserve_space(path)
    return header + offsets


def write_image(
    file, times: CacheTimes, path: str, box, at: int, shape: list[int], size: int
) -> None:
    """Decode one image and write its pixels at byte `at` of the open cache `file`."""
    pixels = load_image(path, box, size)
    if list(pixels.shape[:2]) != shape:
        raise ValueError(
            f"{path}: decoded as {pixels.shape[:2]}, its header says {tuple(shape)}; "
            "replace or remove it"
        )
    start = time.perf_counter()
    write_at(file, memoryview(pixels.reshape(-1)), at)
    times.add("writing", time.perf_counter() - start)


def write_at(file, data: memoryview, at: int) -> None:
    """All of `data` at byte `at` of `file` (a write may take part of it); an error names the
    file."""
    try:
        while data:
            done = os.pwrite(file.fileno(), data, at)
            if not done:  # (a regular file raises ENOSPC rather)
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            data, at = data[done:], at + done
    except OSError as err:
        raise OSError(err.errno, err.strerror, file.name) from None


def say_whole_images(jobs: list[tuple], outside: list[bool]) -> None:
    """A line for the images whose bounding box lies outside them (a box list of another
    set, or in other units): each is cached whole, as one without a box."""
    found = [job for job, out in zip(jobs, outside, strict=True) if out]
    if found:
        path, box = found[0]
        log.warning(
            f"{len(found)} image(s) have a bounding box with no area inside the image, and are "
            f"taken whole (e.g. {path}: box {tuple(box)}); check the data set's box list"
        )


@dataclass(frozen=True)
class Unread:
    """An image that could not be read: its path, and its one-line error."""

    path: str
    error: str


def tried(read, job: tuple, size: int):
    """`read(*job, size)`, or an `Unread` naming its file: every file is tried, so that one
    error names all that fail, not the first of them each time the cache is built."""
    try:
        return read(*job, size)
    except ValueError as err:
        return Unread(job[0], str(err).splitlines()[0])


def check_all_read(results: list) -> None:
    """A one-line ValueError for the images that could not be read: the first one's error,
    the number of the others and a few of their names."""
    unread = [r for r in results if isinstance(r, Unread)]
    if not unread:
        return
    more = ""
    if len(unread) > 1:
        named = ", ".join(u.path for u in unread[1:4])
        more = (
            f" ({len(unread) - 1} more cannot be read either: {named}{', ...' * (len(unread) > 4)})"
        )
    raise ValueError(f"{unread[0].error}{more}")


def reserve_space(path: Path) -> None:
    with open(path, "r+b") as f:
        try:  # (no posix_fallocate on macOS: there the build fails later, if at all)
            if hasattr(os, "posix_fallocate"):
                os.posix_fallocate(f.fileno(), 0, os.path.getsize(path))
        except OSError as err:
            raise OSError(err.errno, err.strerror, str(path)) from None
