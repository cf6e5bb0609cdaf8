"""Any image folder laid out as root/<class>/<images>, one sub-folder per class."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from bench.data.sources.base import DatasetError, image_table, require

NAME = "folder"
SOURCE = "your own image collection (there is nothing to download)"
LAYOUT = "root/<class>/<images> with one sub-folder per class"
IMAGE_SUFFIXES = frozenset(
    (".jpg", ".jpeg", ".png", ".bmp", ".ppm", ".gif", ".webp", ".tif", ".tiff")
)


def _visible(name: str) -> bool:
    return not name.startswith(".")


def class_images(folder: Path) -> list[Path]:
    """The images anywhere under `folder`, sorted, leaving out hidden files and folders."""
    found = []
    for top, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if _visible(d)]
        found += [
            Path(top) / f
            for f in files
            if _visible(f) and os.path.splitext(f)[1].lower() in IMAGE_SUFFIXES
        ]
    return sorted(found)


def read_folder(root: Path) -> pd.DataFrame:
    """One row per image; label = index of its class folder among the sorted non-empty ones."""
    root = require(Path(root).expanduser().absolute(), NAME, LAYOUT, SOURCE)
    if not root.is_dir():
        raise DatasetError(f"{NAME}: {root} is not a folder; expected {LAYOUT}")
    folders = sorted(p for p in root.iterdir() if p.is_dir() and _visible(p.name))
    if not folders:
        raise DatasetError(f"{NAME}: {root} has no class sub-folders; expected {LAYOUT}")
    classes = [(f.name, images) for f in folders if (images := class_images(f))]
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
