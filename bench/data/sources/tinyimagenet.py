"""Tiny ImageNet (cs231n): 200 ImageNet classes at 64x64 with official train and val splits."""

from __future__ import annotations

import functools
from collections import Counter
from pathlib import Path

import pandas as pd

from bench.data.sources.base import (
    find_dataset_dir,
    image_table,
    malformed,
    reads_data_root,
    require,
)

NAME = "tinyimagenet"
SOURCE = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"
FOLDER = "tiny-imagenet-200"
LAYOUT = (
    f"root/{FOLDER}/ (or that folder itself) with wnids.txt, words.txt, "
    "train/<wnid>/images/<wnid>_<k>.JPEG, train/<wnid>/<wnid>_boxes.txt, "
    "val/val_annotations.txt and val/images/"
)
IMAGE_SUFFIXES = (".jpeg", ".jpg")
Box = tuple[float, float, float, float]


# The reader's one-line errors: a missing file or folder, a malformed one.
_need = functools.partial(require, dataset=NAME, layout=LAYOUT, source=SOURCE)
_bad = functools.partial(malformed, NAME)


def _lines(path: Path) -> list[str]:
    text = _need(path).read_text(encoding="utf-8-sig", errors="replace")
    return [line.strip() for line in text.splitlines() if line.strip()]


def _fields(path: Path, count: int) -> list[list[str]]:
    rows = []
    for number, line in enumerate(_lines(path), 1):
        fields = line.split("\t")
        if len(fields) != count:
            raise _bad(path, f"line {number} has {len(fields)} tab-separated fields, not {count}")
        rows.append(fields)
    return rows


def _box(path: Path, fields: list[str]) -> Box:
    try:
        x1, y1, x2, y2 = (float(v) for v in fields)
    except ValueError:
        raise _bad(path, f"non-numeric box {' '.join(fields)!r}") from None
    return x1, y1, x2, y2


def read_wnids(base: Path) -> list[str]:
    """The wnids of wnids.txt, sorted: a wnid's label is its index here."""
    path = base / "wnids.txt"
    wnids = _lines(path)
    if not wnids:
        raise _bad(path, "lists no wnids")
    if len(set(wnids)) != len(wnids):
        raise _bad(path, "lists a wnid twice")
    return sorted(wnids)


def class_names(path: Path, wnids: list[str]) -> dict[str, str]:
    """wnid -> the first comma-separated name in words.txt (all its words where that clashes)."""
    wanted = set(wnids)
    words = {}
    for line in _lines(path):
        wnid, _, text = line.partition("\t")
        if wnid in wanted:
            words[wnid] = text.strip()
    missing = [w for w in wnids if w not in words]
    if missing:
        raise _bad(path, f"has no words for {len(missing)} wnid(s), e.g. {missing[0]}")
    first = {w: words[w].split(",")[0].strip() for w in wnids}
    counts = Counter(first.values())
    return {w: words[w] if counts[first[w]] > 1 else first[w] for w in wnids}


def _train_rows(base: Path, wnids: list[str], names: dict[str, str]) -> list[dict]:
    rows = []
    for label, wnid in enumerate(wnids):
        folder = base / "train" / wnid
        images = _need(folder / "images")
        boxes_path = folder / f"{wnid}_boxes.txt"
        boxes = {f[0]: _box(boxes_path, f[1:]) for f in _fields(boxes_path, 5)}
        files = sorted(
            p for p in images.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.name[0] != "."
        )  # not macOS's ._NAME.JPEG companions
        if not files:
            raise _bad(images, "holds no .JPEG images")
        nan = (float("nan"),) * 4
        for file in files:
            rows.append(_row(file, label, wnid, names, boxes.get(file.name, nan), "train"))
    return rows


def _val_rows(base: Path, wnids: list[str], names: dict[str, str]) -> list[dict]:
    images = _need(base / "val" / "images")
    present = {p.name for p in images.iterdir()}
    path = base / "val" / "val_annotations.txt"
    labels = {w: i for i, w in enumerate(wnids)}
    rows = []
    for file, wnid, *box in _fields(path, 6):
        if wnid not in labels:
            raise _bad(path, f"{file} names wnid {wnid}, which is not in wnids.txt")
        if file not in present:
            raise _bad(path, f"names {file}, which is not in {images}")
        rows.append(_row(images / file, labels[wnid], wnid, names, _box(path, box), "val"))
    return rows


def _row(path: Path, label: int, wnid: str, names: dict[str, str], box: Box, split: str) -> dict:
    row = dict(path=str(path), label=label, class_name=names[wnid], split=split, wnid=wnid)
    return row | dict(zip(("x1", "y1", "x2", "y2"), box, strict=True))


@reads_data_root
def read_tinyimagenet(root: Path) -> pd.DataFrame:
    """Train and val images (test is unlabelled and left out); label = index in sorted wnids."""
    base = find_dataset_dir(root, FOLDER, "wnids.txt", _need)
    wnids = read_wnids(base)
    names = class_names(base / "words.txt", wnids)
    return image_table(_train_rows(base, wnids, names) + _val_rows(base, wnids, names))
