"""Any image folder laid out as root/<class>/<images>, one sub-folder per class."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from bench.data.names import FOLDER_PREFIX
from bench.data.sources.base import DatasetError, image_table, require
from bench.util.progress import log

NAME = "folder"
SOURCE = "your own image collection (there is nothing to download)"
LAYOUT = "root/<class>/<images> with one sub-folder per class"
IMAGE_SUFFIXES = frozenset(
    (".jpg", ".jpeg", ".png", ".bmp", ".ppm", ".gif", ".webp", ".tif", ".tiff")
)


SAID: set[tuple] = set()  # the folders whose left-out files were said, in this process


def _visible(name: str) -> bool:
    return not name.startswith(".")


def class_images(folder: Path, unread: list[str] | None = None) -> list[Path]:
    """The images anywhere under `folder`, sorted, leaving out hidden files and folders; the
    names of files that Pillow reads but whose suffix is none of ours added to `unread`."""
    found = []
    for top, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if _visible(d)]
        for f in filter(_visible, files):
            suffix = os.path.splitext(f)[1].lower()
            if suffix in IMAGE_SUFFIXES:
                found.append(Path(top) / f)
            elif unread is not None and suffix in pillow_suffixes():
                unread.append(f)
    return sorted(found)


@functools.cache
def pillow_suffixes() -> frozenset[str]:
    from PIL import Image

    return frozenset(Image.registered_extensions())


def say_left_out(root: Path, unread: list[str], empty: list[str]) -> None:
    """One line each for image files left out by their suffix (e.g. .jfif) and for class
    folders without an image: a class or images missing from a run are said as it starts."""
    if (root, len(unread), tuple(empty)) in SAID:  # a command reads a folder more than once
        return
    SAID.add((root, len(unread), tuple(empty)))
    if unread:
        suffixes = sorted({os.path.splitext(f)[1].lower() for f in unread})
        log.warning(
            f"{NAME}: {root}: {len(unread)} file(s) left out, images by their suffix but none "
            f"of {' '.join(sorted(IMAGE_SUFFIXES))} ({', '.join(suffixes)}; e.g. {unread[0]}); "
            "rename them to be read"
        )
    if empty:
        log.warning(
            f"{NAME}: {root}: class folder(s) without an image, left out: {', '.join(empty)}"
        )


def read_folder(root: Path) -> pd.DataFrame:
    """One row per image; label = index of its class folder among the sorted non-empty ones."""
    root = require(Path(root).expanduser().absolute(), NAME, LAYOUT, SOURCE)
    if not root.is_dir():
        raise DatasetError(f"{NAME}: {root} is not a folder; expected {LAYOUT}")
    folders = sorted(p for p in root.iterdir() if p.is_dir() and _visible(p.name))
    if not folders:
        raise DatasetError(f"{NAME}: {root} has no class sub-folders; expected {LAYOUT}")
    unread: list[str] = []
    listed = [(f.name, class_images(f, unread)) for f in folders]
    say_left_out(root, unread, [name for name, images in listed if not images])
    classes = [(name, images) for name, images in listed if images]
    if len(classes) < 2:
        raise DatasetError(
            f"{NAME}: {root} has {len(classes)} class folder(s) with images, need at least 2; "
            f"expected {LAYOUT} (image suffixes: {' '.join(sorted(IMAGE_SUFFIXES))})"
        )
    rows = [
        dict(path=str(p), label=label, class_name=name)
        for label, (name, images) in enumerate(classes)
        for p in images
    ]
    return image_table(rows)


def check_outside_data(path: Path, datasets: Iterable[str], option: str) -> None:
    """A one-line ValueError where `path` (what `option` writes: `run --results`, `report`,
    `features` and `visualize --out`) lies inside the folder of a `folder:` data set: never
    written into a user's data, where it would be read back as a class of it."""
    where = Path(path).expanduser().resolve()
    for dataset in dict.fromkeys(d for d in datasets if d.startswith(FOLDER_PREFIX)):
        root = Path(dataset.removeprefix(FOLDER_PREFIX)).expanduser().resolve()
        if where == root or root in where.parents:
            raise ValueError(
                f"{option} {path} lies inside the data folder {root}: nothing is written into "
                f"your data, where it would be read back as a class of it; give {option} "
                "outside it (e.g. run from the folder above)"
            )
