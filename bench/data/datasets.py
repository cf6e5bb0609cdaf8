"""Data sets as train / validation / test splits of (image, label, index) items."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch
from sklearn.datasets import load_digits
from torch.utils.data import Dataset

from bench.data.crop_area import parse_crop_scale
from bench.data.crops import Crops
from bench.data.emoji import EmojiSpec
from bench.data.emoji_render import load_emoji
from bench.data.feature_files import load_feature_file
from bench.data.glyphs import GlyphSpec, load_glyphs
from bench.data.image_cache import build_cache, images_cache_dir
from bench.data.images import CachedImages
from bench.data.names import (
    FEATURES_PREFIX,
    FOLDER_PREFIX,
    READER_NAMES,
    check_dataset_name,
    is_emoji,
    is_glyphs,
)
from bench.data.presence import default_data_root, reader
from bench.data.sources.folder import read_folder
from bench.data.splits import (
    QUERY,
    carve_validation,
    limit_per_class,
    make_splits,
    parse_val_split,
    trained_protocol,
    training_classes_first,
)
from bench.data.tensor_sets import DataSplits, TensorImages, tensor_splits
from bench.protocols import DEFAULT_PROTOCOL, get_protocol

EMOJI_SHIFT = 16  # an emoji's training images are shifted by up to 1/16 of their side

READERS: dict[str, Callable[[Path], pd.DataFrame]] = {name: reader(name) for name in READER_NAMES}


def query_flags(split: Dataset) -> np.ndarray | None:
    """Which items of a test split are queries (the query-gallery protocol's), None for a split
    whose items are all searched among each other."""
    flags = getattr(split, "queries", None)
    return None if flags is None else np.asarray(flags, dtype=bool)


def digits(protocol: str, val_fraction: float, **chosen: Any) -> DataSplits:
    """scikit-learn's 8x8 digits; metric protocol: classes 0-4 train, 5-9 test. `chosen`: the
    train_per_class and val_split given (`tensor_splits`' defaults where not)."""
    data = load_digits()
    images = torch.from_numpy(data.images.astype(np.float32) / 16.0).unsqueeze(1)
    labels = data.target.astype(np.int64)
    return tensor_splits("digits", images, labels, protocol, val_fraction, shift=1, **chosen)


def glyphs(name: str, protocol: str, val_fraction: float, **chosen: Any) -> DataSplits:
    """A procedural glyphs set (`glyphs.py`); metric protocol: the first half of the classes
    train, the second half test. The images stay uint8 in the memory-mapped cache. `chosen`:
    as `digits`'."""
    pixels, labels = load_glyphs(GlyphSpec.parse(name))
    return tensor_splits(name, pixels, labels, protocol, val_fraction, **chosen)


def emoji(
    name: str, protocol: str, val_fraction: float, data_root: Path | None, **chosen: Any
) -> DataSplits:
    """The emoji sets (`emoji.py`), rendered into the cache and memory-mapped; metric
    protocol: the first half of the classes (in their names' SHA-1 order) train, the rest
    test; cross-style: the held-out sets' images are the queries. Training images shifted by
    up to a sixteenth of their side (a padded random crop). `chosen`: as `digits`'."""
    spec = EmojiSpec.parse(name)
    check_held_out(spec, protocol)
    rendered = load_emoji(spec, data_root or default_data_root())
    held = [rendered.set_names.index(s) for s in spec.held_out_names()]
    data = tensor_splits(
        name,
        rendered.images,
        rendered.labels,
        protocol,
        val_fraction,
        shift=spec.size // EMOJI_SHIFT,
        names=rendered.class_names,
        published=np.where(np.isin(rendered.sets, held), QUERY, ""),
        **chosen,
    )
    return replace(data, packages=rendered.packages(), credits=rendered.credits())


def check_held_out(spec: EmojiSpec, protocol: str) -> None:
    """A one-line ValueError where the protocol queries held-out sets and none are named, or
    sets are held out under a protocol that holds none out (they would change nothing)."""
    takes = trained_protocol(protocol).held_out_styles
    if takes and not spec.held_out:
        raise ValueError(
            f"the {protocol} protocol queries sets held out of training: name them in the data "
            f"set, e.g. --dataset {spec.name()}{':' if spec.name() == 'emoji' else ','}"
            "held_out=twemoji+openmoji"
        )
    if spec.held_out and not takes:
        raise ValueError(
            f"held_out={spec.held_out} applies to --protocol cross-style only (the {protocol} "
            "protocol trains and tests on every set): drop it, or give --protocol cross-style"
        )


def read_table(name: str, data_root: Path) -> tuple[pd.DataFrame, Path]:
    """The image table of a data set and the folder it was read from."""
    if name.startswith(FOLDER_PREFIX):
        root = Path(name[len(FOLDER_PREFIX) :]).expanduser()
        return read_folder(root), root
    return READERS[name](Path(data_root)), Path(data_root)


def image_splits(
    name: str,
    protocol: str = DEFAULT_PROTOCOL,
    val_fraction: float = 0.2,
    data_root: Path | None = None,
    resize: int = 256,
    crop: int = 224,
    pad: int = 0,
    train_per_class: int = 0,
    val_split: str = "images",
    crop_mode: str = "squash",
    crop_scale: str = "",
    normalization: tuple[tuple, tuple] | None = None,
) -> DataSplits:
    """An image data set under a protocol: decoded once into the cache, then cropped a batch
    at a time (`bench.data.crops`) and normalised by `normalization` (mean, std; None:
    ImageNet's)."""
    table, root = read_table(name, data_root or default_data_root())
    if "source" in table and trained_protocol(protocol).field_images_only:  # Leafsnap
        table = table[table["source"] == "field"].reset_index(drop=True)
    splits = make_splits(protocol, table, val_fraction, train_per_class, val_split)
    cache = build_cache(
        table["path"].tolist(), boxes_for(table, protocol), resize, images_cache_dir(root)
    )
    labels, order = training_classes_first(table["label"].to_numpy(), splits.train)
    stats = {} if normalization is None else dict(zip(("mean", "std"), normalization, strict=True))
    eval_tf = Crops(crop, resize, crop_mode, **stats)
    scale = parse_crop_scale(crop_scale)
    train_tf = Crops(crop, resize, crop_mode, train=True, pad=pad, scale=scale, **stats)

    def part(rows: np.ndarray, crops: Crops) -> CachedImages:
        return CachedImages(cache, rows, labels[rows], crops)

    test = part(splits.test, eval_tf)
    if len(splits.queries):  # which items are queries (In-Shop's); the others, their gallery
        test.queries = np.asarray(splits.queries, dtype=bool)
    names = table.drop_duplicates("label").sort_values("label")["class_name"]
    return DataSplits(
        name=name,
        train=part(splits.train, train_tf),
        train_eval=part(splits.train, eval_tf),
        val=part(splits.val, eval_tf),
        test=test,
        in_channels=3,
        num_train_classes=len(np.unique(labels[splits.train])),
        unseen=part(splits.unseen, eval_tf) if len(splits.unseen) else None,
        class_names=tuple(names.astype(str).to_numpy()[order]),
    )


def train_classes_first(train: np.ndarray, *others: np.ndarray) -> list[np.ndarray]:
    """Labels renumbered so that the training classes are 0..C-1 (what a classifier head needs)
    and any other class follows; the same class keeps the same number in every split."""
    parts = [np.asarray(part) for part in (train, *others)]
    labels, _ = training_classes_first(np.concatenate(parts), np.arange(len(parts[0])))
    return np.split(labels, np.cumsum([len(part) for part in parts])[:-1])


def feature_splits(
    name: str, val_fraction: float = 0.2, train_per_class: int = 0, val_split: str = "images"
) -> DataSplits:
    """Cached feature vectors (`features:PATH.npz`) as a data set for the small `mlp` or `linear`
    heads: the file's own splits; validation carved from training where the file has none."""
    f = load_feature_file(name)
    train_x, train_y, val_x, val_y = f.train, f.train_labels, f.val, f.val_labels
    if not len(val_y):
        by_classes, fold = parse_val_split(val_split)
        tr, va = carve_validation(train_y, val_fraction, by_classes, fold)
        train_x, train_y, val_x, val_y = train_x[tr], train_y[tr], train_x[va], train_y[va]
    if train_per_class:
        keep = limit_per_class(np.arange(len(train_y)), train_y, train_per_class)
        train_x, train_y = train_x[keep], train_y[keep]
    train_y, val_y, test_y = train_classes_first(train_y, val_y, f.test_labels)

    def part(x: np.ndarray, y: np.ndarray) -> TensorImages:
        return TensorImages(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)), y)

    return DataSplits(
        name=name,
        train=part(train_x, train_y),
        train_eval=part(train_x, train_y),
        val=part(val_x, val_y),
        test=part(f.test, test_y),
        in_channels=f.dims,
        num_train_classes=len(np.unique(train_y)),
    )


def boxes_for(table: pd.DataFrame, protocol: str) -> list | None:
    """Bounding boxes to crop to, where the protocol crops to them and the data set has them."""
    box_cols = ["x1", "y1", "x2", "y2"]
    if not get_protocol(protocol).crop_to_boxes or table[box_cols].isna().all().all():
        return None
    return [None if np.isnan(b).any() else list(b) for b in table[box_cols].to_numpy(float)]


def check_dataset(name: str) -> None:
    """A ValueError for a data set that is none of `dataset_names()`, or a glyphs set whose
    parameters are wrong."""
    check_dataset_name(name)
    if is_glyphs(name):
        GlyphSpec.parse(name)
    if is_emoji(name):
        EmojiSpec.parse(name)


def load_dataset(
    name: str, protocol: str = DEFAULT_PROTOCOL, val_fraction: float = 0.2, **image_opts
):
    """The splits of a data set under a protocol; `image_opts` go to `image_splits`."""
    check_dataset(name)
    chosen = {k: image_opts[k] for k in ("train_per_class", "val_split") if k in image_opts}
    if name == "digits":
        return digits(protocol, val_fraction, **chosen)
    if is_glyphs(name):
        return glyphs(name, protocol, val_fraction, **chosen)
    if is_emoji(name):
        return emoji(name, protocol, val_fraction, data_root=image_opts.get("data_root"), **chosen)
    if name.startswith(FEATURES_PREFIX):
        return check_queries(feature_splits(name, val_fraction, **chosen), protocol)
    return image_splits(name, protocol, val_fraction, **image_opts)


def check_queries(data: DataSplits, protocol: str) -> DataSplits:
    """The data, where its protocol searches no gallery or its test split flags its queries; a
    one-line ValueError, before anything trains, for a features file under a gallery protocol
    (its rows say nothing of queries)."""
    if get_protocol(protocol).gallery and query_flags(data.test) is None:
        raise ValueError(
            f"the {protocol} protocol searches query images in a gallery, and {data.name} has no "
            "query images: a features file's split is train, val and test only; use --protocol "
            "metric"
        )
    return data


def load_run_data(cfg, normalization: tuple[tuple, tuple] | None = None) -> DataSplits:
    """The splits a run's configuration (a `bench.runs.config.RunConfig`) names; its images
    normalised by `normalization` (its backbone's mean and std; None: ImageNet's)."""
    return load_dataset(
        cfg.dataset,
        cfg.protocol,
        cfg.val_fraction,
        data_root=cfg.data_root or None,
        resize=cfg.resize,
        crop=cfg.crop,
        pad=cfg.pad,
        crop_mode=cfg.crop_mode,
        crop_scale=cfg.crop_scale,
        train_per_class=cfg.train_per_class,
        val_split=cfg.val_split,
        normalization=normalization,
    )
