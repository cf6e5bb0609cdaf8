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


def folder_root(root: Path) -> Path:
    """`root` made absolute, where it is a folder; else a one-line DatasetError (cheap: `run`
    checks it before torch is imported)."""
    root = require(Path(root).expanduser().absolute(), NAME, LAYOUT, SOURCE)
    if not root.is_dir():
        raise DatasetError(f"{NAME}: {root} is not a folder; expected {LAYOUT}")
    return root


def read_folder(root: Path) -> pd.DataFrame:
    """One row per image; label = index of its class folder among the sorted non-empty ones."""
    root = folder_root(root)
    folders = sorted(p for p in root.iterdir() if p.is_dir() and _visible(p.name))
    if not folders:
        raise DatasetError(f"{NAME}: {root} has no class sub-folders; expected {LAYOUT}")
    unread: list[str] = []
    listed = [(f.name, class_images(f, unread)) for f in folders]
    say_left_out(root, unread, [name for name, images in listed if not images])
    classes = [(name, images) for name, images in listed if images]
    check_own_images(root, classes)
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


def real_paths(folder: Path, images: list[Path]) -> list[str]:
    """The real path of each image under `folder`: the class folder resolved once (it may link
    elsewhere), a linked file resolved on its own (os.walk follows no linked sub-folder). An
    lstat an image, not a realpath's one per part of its path."""
    real, start = os.path.realpath(folder) + os.sep, len(str(folder)) + 1
    paths = map(str, images)
    return [os.path.realpath(p) if os.path.islink(p) else real + p[start:] for p in paths]


def check_own_images(root: Path, classes: list[tuple[str, list[Path]]]) -> None:
    """A one-line DatasetError where an image file is read twice (by its real path): a class
    folder that links to another class, or an image that links to another's. Its two copies
    are split apart like any two images, so a training image was tested again under the other
    class's label (or its own), without a word (issue 69)."""
    seen: dict[str, tuple[str, Path]] = {}
    twice: list[tuple[str, Path, str, Path]] = []
    for name, images in classes:
        for path, real in zip(images, real_paths(root / name, images), strict=True):
            first = seen.setdefault(real, (name, path))
            if first[1] is not path:  # this image's, or an earlier one's
                twice.append((*first, name, path))
    if twice:
        raise DatasetError(shared_line(root, twice))


def shared_line(root: Path, twice: list[tuple[str, Path, str, Path]]) -> str:
    """What `check_own_images` says: the first two classes (or class) that share images, how
    many, an example, and what to do."""
    a, a_path, b, b_path = twice[0]
    count = sum((x, y) == (a, b) for x, _, y, _ in twice)
    example = f"{b_path.relative_to(root)} is {a_path.relative_to(root)}"
    who = (
        f"class {a!r} holds {count} image(s) twice"
        if a == b
        else (f"classes {a!r} and {b!r} share {count} image(s)")
    )
    return (
        f"{NAME}: {root}: {who} by their real path (e.g. {example}, a link), so a training "
        "image would be tested again as another's neighbour; an image belongs to one class "
        "folder, once: remove the link(s) and run again"
    )


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
