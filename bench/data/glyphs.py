"""Glyphs: a procedural image data set on which learning matters, generated on first use.

A class is 2-4 random quadratic Bezier strokes in the unit square. An instance draws them with
its control points jittered, through a random affine transform (rotation, scale, shear,
translation) and with its own stroke width, then adds pixel noise. The raw pixels of two
instances of a class differ as much as those of two classes, so a learned embedding has much to
add to the inputs (README, "Glyphs"). Everything derives from the seed and the class index: the
same parameters give the same images on any machine, and a class looks the same whatever the
number of classes. Nothing is downloaded or committed; the images are cached as a .npz named by
a fingerprint of the parameters and of the generator's version, rendered into it a chunk of
classes at a time and memory-mapped when read, so that no step holds a large set twice.

`glyphs` is the default set; `glyphs:classes=40,instances=20,size=16` (any of classes,
instances, size, seed, difficulty, first) is another, from a CI subset to a stress set. `first`
is the index of the set's first class: `glyphs:first=1000,classes=1000` holds classes 1000-1999,
the same images those classes have in any set that contains them, and none of the default set's
classes 0-199 (`nngk-bench pretrain`'s source). A set's labels number its classes from 0.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch
from tqdm import tqdm

from bench.data.image_cache import cache_folder, remove_stale_parts
from bench.data.names import GLYPHS_NAME
from bench.data.set_params import parse_set_params
from bench.util.progress import log

NAME = GLYPHS_NAME
VERSION = 1  # bump when the images change, so that no cache of older images is read
STROKES = (2, 4)  # strokes per class, inclusive
POINTS = 24  # points sampled along each stroke
ROTATION = 0.45  # radians, each way
SCALE = 0.2  # 1 +- this
SHEAR = 0.2
TRANSLATION = 0.15  # of the image side, each way
JITTER = 0.03  # control points, in image sides (standard deviation)
WIDTH = 0.035  # stroke width, in image sides (the Gaussian profile's standard deviation)
WIDTH_JITTER = 0.25  # the width varies by +- this share
NOISE = 0.08  # pixel noise (standard deviation, intensities in [0, 1])
RENDER_CHUNK = 256  # images rendered at once (whole classes: one at least)
MAX_SIZE = 512  # pixels a side; a backbone's --resize scales them up
RENDER_PIXELS = 256 * 28 * 28  # pixels rendered at once (their distances to every point)
READ_BLOCK = 1 << 24  # bytes read at once to check a cache's CRC
PROGRESS_FROM = 50_000  # images: a progress bar while generating a set this large


@dataclass(frozen=True)
class GlyphSpec:
    """The parameters of a glyphs set; `difficulty` scales every variation of the instances;
    `first` is the index of the first of its `classes` classes."""

    classes: int = 200
    instances: int = 30
    size: int = 28
    seed: int = 0
    difficulty: float = 1.0
    first: int = 0

    @classmethod
    def parse(cls, name: str) -> GlyphSpec:
        """'glyphs' or 'glyphs:classes=40,size=16'; a one-line ValueError for anything else."""
        return parse_set_params(cls, name, NAME, "glyphs:classes=40,size=16").checked()

    def checked(self) -> GlyphSpec:
        if self.classes < 4 or self.instances < 2 or self.size < 8:
            raise ValueError(
                f"glyphs needs classes >= 4, instances >= 2 and size >= 8; got {self.name()}"
            )
        if self.size > MAX_SIZE:  # was a raw allocator error
            raise ValueError(
                f"glyphs needs size <= {MAX_SIZE}; got {self.size}, whose {self.classes} x "
                f"{self.instances} images would take {self.nbytes / 1e9:.3g} GB; give a smaller "
                "size (a backbone's --resize scales the images up)"
            )
        if not 0 <= self.difficulty <= 3 or self.seed < 0 or self.first < 0:  # NaN too
            raise ValueError(
                f"glyphs needs 0 <= difficulty <= 3, seed >= 0 and first >= 0; got {self.name()}"
            )
        return self

    @property
    def nbytes(self) -> int:
        """The bytes of its images, one a pixel."""
        return self.classes * self.instances * self.size**2

    def class_indices(self) -> range:
        """The indices of its classes among all the classes of its seed."""
        return range(self.first, self.first + self.classes)

    def shares_classes(self, seed: int, classes: range) -> bool:
        """Whether these classes of glyphs seed `seed` include some of its own (those of
        another seed are other glyphs, whatever their numbers)."""
        own = self.class_indices()
        return seed == self.seed and classes.start < own.stop and own.start < classes.stop

    def name(self) -> str:
        """The canonical data set name: 'glyphs', plus the parameters that differ from it."""
        default = GlyphSpec()
        args = [f"{k}={v:g}" for k, v in asdict(self).items() if v != getattr(default, k)]
        return NAME + (":" + ",".join(args) if args else "")

    def fingerprint(self) -> str:
        # `first` came later: left out at 0, so that the sets before it keep their cache files.
        record = {**asdict(self), "version": VERSION}
        if not self.first:
            del record["first"]
        return hashlib.sha1(json.dumps(record, sort_keys=True).encode()).hexdigest()[:12]


def class_strokes(spec: GlyphSpec, label: int) -> np.ndarray:
    """A class's strokes: (strokes, 3 control points, 2) in the unit square."""
    rng = np.random.default_rng([spec.seed, label, 0])
    count = int(rng.integers(STROKES[0], STROKES[1] + 1))
    return rng.uniform(0.15, 0.85, size=(count, 3, 2))


def instance_points(spec: GlyphSpec, label: int) -> tuple[np.ndarray, np.ndarray]:
    """Every instance of a class as points along its strokes, (instances, points, 2), with its
    stroke width, (instances,)."""
    strokes = class_strokes(spec, label)
    rng = np.random.default_rng([spec.seed, label, 1])
    n, d = spec.instances, spec.difficulty
    control = strokes[None] + rng.normal(0, JITTER * d, size=(n, *strokes.shape))
    t = np.linspace(0, 1, POINTS)[:, None]
    p0, p1, p2 = control[:, :, 0, None], control[:, :, 1, None], control[:, :, 2, None]
    curves = (1 - t) ** 2 * p0 + 2 * (1 - t) * t * p1 + t**2 * p2  # (n, strokes, POINTS, 2)
    points = curves.reshape(n, -1, 2) - 0.5
    angle = rng.uniform(-ROTATION * d, ROTATION * d, n)
    scale = 1 + rng.uniform(-SCALE * d, SCALE * d, n)
    shear = rng.uniform(-SHEAR * d, SHEAR * d, n)
    shift = rng.uniform(-TRANSLATION * d, TRANSLATION * d, (n, 1, 2))
    cos, sin = np.cos(angle), np.sin(angle)
    rotate = np.stack([np.stack([cos, -sin], -1), np.stack([sin, cos], -1)], -2)
    shape = np.stack([np.stack([scale, shear], -1), np.stack([0 * scale, scale], -1)], -2)
    affine = rotate @ shape  # (n, 2, 2)
    points = points @ affine.transpose(0, 2, 1) + 0.5 + shift
    width = WIDTH * (1 + rng.uniform(-WIDTH_JITTER * d, WIDTH_JITTER * d, n))
    return points, width


def class_noise(spec: GlyphSpec, label: int) -> np.ndarray:
    """Standard normal pixel noise of a class's instances, (instances, size, size)."""
    rng = np.random.default_rng([spec.seed, label, 2])
    return rng.normal(size=(spec.instances, spec.size, spec.size))


def render(points: np.ndarray, width: np.ndarray, size: int) -> np.ndarray:
    """Strokes as a Gaussian profile around the nearest point: (n, size, size) in [0, 1]."""
    centres = (torch.arange(size, dtype=torch.float64) + 0.5) / size
    grid = torch.stack(torch.meshgrid(centres, centres, indexing="xy"), -1).reshape(-1, 2)
    pts = torch.from_numpy(points)
    # Exact differences, not the faster matrix-product form, so the pixels are the same anywhere.
    distances = torch.cdist(
        grid.expand(len(pts), -1, -1), pts, compute_mode="donot_use_mm_for_euclid_dist"
    )
    nearest = distances.amin(dim=2)  # (n, pixels)
    w = torch.from_numpy(width)[:, None]
    return torch.exp(-(nearest**2) / (2 * w**2)).reshape(-1, size, size).numpy()


def class_images(spec: GlyphSpec, positions: range) -> np.ndarray:
    """The uint8 images (n x instances, size, size) of the classes at these positions of the set,
    rendered together (a chunk of `generate`'s)."""
    indices = [spec.first + p for p in positions]
    points, widths = zip(*(instance_points(spec, index) for index in indices), strict=True)
    # Classes differ in their number of strokes: pad with copies of a glyph's own first point
    # (a repeated point leaves every nearest distance, so every pixel, as it is).
    longest = max(p.shape[1] for p in points)
    padded = np.concatenate(
        [np.concatenate([p, p[:, :1].repeat(longest - p.shape[1], 1)], 1) for p in points]
    )
    widths = np.concatenate(widths)
    step = max(1, RENDER_PIXELS // spec.size**2)  # large images a few at a time
    images = np.concatenate(
        [
            render(padded[i : i + step], widths[i : i + step], spec.size)
            for i in range(0, len(padded), step)
        ]
    )
    noise = np.concatenate([class_noise(spec, index) for index in indices])
    images = np.clip(images + NOISE * spec.difficulty * noise, 0, 1)
    return np.round(images * 255).astype(np.uint8)


def class_chunks(spec: GlyphSpec) -> list[range]:
    """The set's class positions in chunks of about RENDER_CHUNK images (one class at least):
    what is rendered at once, so memory does not grow with the set."""
    step = max(1, RENDER_CHUNK // spec.instances)
    return [range(c, min(c + step, spec.classes)) for c in range(0, spec.classes, step)]


def set_labels(spec: GlyphSpec) -> np.ndarray:
    return np.repeat(np.arange(spec.classes, dtype=np.int64), spec.instances)


def generate(spec: GlyphSpec) -> tuple[np.ndarray, np.ndarray]:
    """(images (N, size, size) uint8, labels (N,)) in memory, class by class, instances in
    order; label i is the class of index `spec.first + i`."""
    images = np.empty((spec.classes * spec.instances, spec.size, spec.size), np.uint8)
    for chunk in class_chunks(spec):
        images[chunk.start * spec.instances : chunk.stop * spec.instances] = class_images(
            spec, chunk
        )
    return images, set_labels(spec)


def read_cache(path: Path, spec: GlyphSpec) -> tuple[np.ndarray, np.ndarray] | str:
    """The cached images of `spec`, memory-mapped (read-only), and its labels, or what is wrong
    with the file: missing, not a whole .npz (truncated, empty, a damaged member fails its CRC
    check) or not this set's."""
    if not path.is_file():
        return "missing"
    if not zipfile.is_zipfile(path):
        return f"damaged: not a whole .npz ({path.stat().st_size} bytes)"
    try:
        images = mapped_member(path, "images.npy")
        with np.load(path, allow_pickle=False) as saved:
            labels = saved["labels"]
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as err:
        return f"damaged: {' '.join(str(err).split()) or type(err).__name__}"
    count = spec.classes * spec.instances
    if images.shape != (count, spec.size, spec.size) or images.dtype != np.uint8:
        return f"damaged: images of shape {images.shape} and dtype {images.dtype}"
    if not np.array_equal(labels, set_labels(spec)):
        return "damaged: other labels"
    return images, labels


def mapped_member(path: Path, name: str) -> np.memmap:
    """An array stored uncompressed in a .npz (np.savez's way), memory-mapped where it lies in
    the file, after one pass over its bytes in blocks to check its CRC (a BadZipFile)."""
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(name)
        if info.compress_type != zipfile.ZIP_STORED:
            raise ValueError(f"{name} is compressed, so it cannot be memory-mapped")
        with archive.open(info) as member:
            while member.read(READ_BLOCK):
                pass
    with open(path, "rb") as f:
        f.seek(info.header_offset)
        local = f.read(30)  # the member's local header: its data follow its name and extra
        if len(local) < 30 or local[:4] != b"PK\x03\x04":
            raise ValueError(f"no local header of {name}")
        name_length, extra_length = struct.unpack("<HH", local[26:30])
        f.seek(info.header_offset + 30 + name_length + extra_length)
        version = np.lib.format.read_magic(f)
        read_header = {
            (1, 0): np.lib.format.read_array_header_1_0,
            (2, 0): np.lib.format.read_array_header_2_0,
        }
        if version not in read_header:
            raise ValueError(f"{name} has .npy format {version}")
        shape, fortran, dtype = read_header[version](f)
        offset = f.tell()
    if fortran or dtype.hasobject:
        raise ValueError(f"{name} is not a plain C-ordered array")
    return np.memmap(path, dtype, "r", offset, shape)


@contextmanager
def whole_file(path: Path, name: str) -> Iterator[BinaryIO]:
    """A file to write a cache into, under a temporary name renamed to `path` once the block
    ends and the file is synced whole; a failure (an OSError for a full disk) leaves no
    temporary file. `name`: the set's, whose temporary files of dead processes go first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_parts(path.parent, f".{name}-*.tmp.npz")
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.npz")
    try:
        with open(tmp, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_cache(path: Path, spec: GlyphSpec) -> None:
    """Render the set a chunk at a time into its .npz (the layout np.savez writes: uncompressed
    members, so that the images can be memory-mapped), written whole or not at all
    (`whole_file`). A progress bar for a large set."""
    count, shape = spec.classes * spec.instances, (spec.size, spec.size)
    header = {"descr": "|u1", "fortran_order": False, "shape": (count, *shape)}
    with whole_file(path, NAME) as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as archive:
        with archive.open("images.npy", "w", force_zip64=True) as member:
            np.lib.format.write_array_header_1_0(member, header)
            with tqdm(
                total=count,
                desc=f"generating {spec.name()}",
                unit="images",
                disable=count < PROGRESS_FROM,
                mininterval=1.0,
            ) as bar:
                for chunk in class_chunks(spec):
                    member.write(class_images(spec, chunk))
                    bar.update(len(chunk) * spec.instances)
        with archive.open("labels.npy", "w", force_zip64=True) as member:
            np.lib.format.write_array(member, set_labels(spec))


def check_room(spec: GlyphSpec, folder: Path) -> None:
    """A one-line error where the set cannot fit the cache's disk (nor, then, memory)."""
    probe = next((p for p in (folder, *folder.parents) if p.exists()), None)
    free = shutil.disk_usage(probe).free if probe else None
    if free is not None and spec.nbytes > free:
        raise ValueError(
            f"{spec.name()} takes {spec.nbytes / 1e9:.3g} GB, more than the "
            f"{free / 1e9:.3g} GB free on the disk of {folder}; give fewer classes, instances "
            "or a smaller size, or point $NNGK_CACHE at a larger disk"
        )


def load_glyphs(spec: GlyphSpec, say=log.info) -> tuple[np.ndarray, np.ndarray]:
    """The images (memory-mapped from the cache) and labels of a glyphs set, generated into the
    cache first where it is missing or damaged (replaced whole, never read); in memory where
    the cache cannot be written."""
    path = cache_folder() / f"{NAME}-{spec.fingerprint()}.npz"
    cached = read_cache(path, spec)
    if not isinstance(cached, str):
        return cached
    count = spec.classes * spec.instances
    check_room(spec, path.parent)
    why = "" if cached == "missing" else f" (the cached file was {cached})"
    say(f"generating {spec.name()}: {count} images of {spec.size}x{spec.size} into {path}{why}")
    try:
        write_cache(path, spec)
    except OSError as err:
        say(f"could not cache {spec.name()} in {path} ({err}); it is generated again next time")
        return generate(spec)
    cached = read_cache(path, spec)
    if isinstance(cached, str):
        raise RuntimeError(f"{path}: the glyphs cache just written reads back {cached}")
    return cached
