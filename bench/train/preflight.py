"""What is checked before anything is written (the data set's baselines, a run folder): that
each run's batches can be drawn and shared, and that its splits can choose an epoch and be
scored. Each fault is a one-line ValueError naming what to change."""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from bench.data.datasets import DataSplits
from bench.data.glyphs import GlyphSpec
from bench.data.names import FEATURES_PREFIX, is_glyphs
from bench.models.backbones import check_backbone_weights
from bench.models.choices import VECTOR_BACKBONES
from bench.protocols import get_protocol
from bench.runs.config import RunConfig
from bench.runs.weights import NAMED_WEIGHTS, read_provenance
from bench.train.distributed import Ranks, check_divisible
from bench.train.loaders import check_batch_fits, load_data, per_class
from bench.train.recipes import check_recipe
from losses import get_loss_class, is_loss
from losses.registry import check_memory_taken

# The settings a run's splits depend on: runs that share them share their data. The image
# pipeline's are those whose declaration applies to it (`setting`'s `applies` in
# bench.runs.config).
DATA_SETTINGS = (
    "dataset",
    "protocol",
    "val_fraction",
    "val_split",
    "train_per_class",
    "data_root",
    *(f.name for f in fields(RunConfig) if f.metadata["applies"]),
)


def check_runs(configs: list[RunConfig], world: int = 1) -> DataSplits:
    """Every run checked (`check_run`) on its data, loaded once for the runs that share it;
    the first run's data, which its baselines take."""
    for backbone, pretrained, crop in dict.fromkeys(
        (c.backbone, c.pretrained, c.crop) for c in configs
    ):
        check_backbone_weights(backbone, pretrained, crop)  # before an image cache is built
    for pretrained, dataset in dict.fromkeys((c.pretrained, c.dataset) for c in configs):
        check_weights_unseen(pretrained, dataset)
    loaded: dict[tuple, DataSplits] = {}
    for cfg in configs:
        key = tuple(getattr(cfg, name) for name in DATA_SETTINGS)
        if key not in loaded:
            loaded[key] = load_data(cfg)
        check_run(cfg, loaded[key], world)
    return loaded[tuple(getattr(configs[0], name) for name in DATA_SETTINGS)]


def check_weights_unseen(pretrained: str, dataset: str) -> None:
    """A one-line ValueError where weights `nngk-bench pretrain` wrote were pretrained on glyphs
    classes of the very glyphs set a run trains and tests on: its test classes would not be
    unseen, and its rows would beat the others' by what the weights had already learned."""
    if not is_glyphs(dataset) or pretrained in NAMED_WEIGHTS:
        return
    record = read_provenance(pretrained)
    try:
        first, last = (int(i) for i in record["classes"])
        seed = int(record.get("glyphs_seed", 0))
    except (KeyError, TypeError, ValueError):  # no provenance, or not of glyphs
        return
    spec = GlyphSpec.parse(dataset)
    if not spec.shares_classes(seed, range(first, last + 1)):
        return
    own = spec.class_indices()
    raise ValueError(
        f"--pretrained {pretrained} was pretrained on glyphs {first}-{last}, which share "
        f"classes with {dataset} ({own.start}-{own.stop - 1}): its test classes would not be "
        f"unseen; pretrain on other classes (nngk-bench pretrain --dataset "
        f"glyphs:first={own.stop},classes={last - first + 1})"
    )


def check_run(cfg: RunConfig, data: DataSplits, world: int = 1) -> None:
    """A one-line ValueError for a run that would train nothing or score nonsense."""
    check_divisible(cfg.batch_size, Ranks(0, world))
    check_input_kind(cfg)
    check_test(cfg, data)
    check_validation(cfg, data)
    check_trained_classes(cfg, data)
    check_batches(cfg, data)
    check_memory(cfg)
    check_recipe(cfg)
    check_sphere(cfg)


def check_sphere(cfg: RunConfig) -> None:
    """A one-line ValueError for a loss on the unit sphere at one dimension: its embeddings are
    +1 or -1, the loss cannot move, and the run scored chance with exit 0."""
    if cfg.dims < 2 and is_loss(cfg.loss) and get_loss_class(cfg.loss).normalize_embeddings:
        raise ValueError(
            f"--dims {cfg.dims}: {cfg.loss}'s embeddings lie on the unit sphere, which in one "
            "dimension holds two points (+1 and -1); give --dims 2 or more"
        )


def check_input_kind(cfg: RunConfig) -> None:
    """The vector heads (mlp, linear) for a features file's vectors, an image network for
    images: the other way round failed in torch's words after the baselines were written."""
    vectors = cfg.dataset.startswith(FEATURES_PREFIX)
    if cfg.backbone in VECTOR_BACKBONES and not vectors:
        raise ValueError(
            f"--backbone {cfg.backbone} takes feature vectors (--dataset features:FILE.npz, "
            f"written by `nngk-bench features`), not {cfg.dataset}'s images; give an image "
            "backbone (e.g. --backbone small_cnn)"
        )
    if vectors and cfg.backbone not in VECTOR_BACKBONES:
        raise ValueError(
            f"--backbone {cfg.backbone} takes images, not a features file's vectors; give "
            f"--backbone {' or '.join(VECTOR_BACKBONES)}"
        )


def check_memory(cfg: RunConfig) -> None:
    """--memory for a loss that takes one, and at least a batch of embeddings."""
    if not cfg.memory:
        return
    check_memory_taken(cfg.loss, cfg.memory)
    if cfg.memory < cfg.batch_size:
        raise ValueError(
            f"--memory {cfg.memory} holds less than a batch (--batch-size {cfg.batch_size}); "
            f"give --memory {cfg.batch_size} or more"
        )


def class_counts(labels) -> np.ndarray:
    return np.unique(np.asarray(labels), return_counts=True)[1]


def check_batches(cfg: RunConfig, data: DataSplits) -> None:
    """Two training classes at least, a batch no larger than the training split, and a
    class-balanced batch that holds two classes or more: a batch of one class has no negative,
    so a pair or triplet loss is 0 at every step and trains nothing."""
    labels = np.asarray(data.train.labels)
    classes = len(class_counts(labels))
    if classes < 2:
        raise ValueError(
            f"the training split of {cfg.dataset} holds {classes_text(classes)}: metric "
            f"learning needs two at least{where_classes_go(cfg)}; use a data set with more "
            "classes"
        )
    check_batch_fits(cfg, len(labels))
    if not get_loss_class(cfg.loss).class_balanced:
        return
    check_m_divides(cfg)
    m = per_class(cfg, labels)
    if cfg.batch_size // m < 2:
        raise ValueError(
            f"a class-balanced batch of {cfg.batch_size} with --m-per-class {cfg.m_per_class} "
            f"holds a single class: {cfg.loss} has no other class to tell it from and would train "
            f"nothing (a loss of 0 at every step); give a --batch-size of {2 * cfg.m_per_class}"
            f" or more (a multiple of --m-per-class {cfg.m_per_class}){smaller_m(cfg)}"
        )
    if m > 1 and class_counts(labels).max() < 2:
        raise ValueError(
            f"each training class of {cfg.dataset} holds one image (--train-per-class "
            f"{cfg.train_per_class}): a class-balanced batch repeats it {m} times, so {cfg.loss}'s "
            "positives would be an image and itself; give --train-per-class 2 or more, or a "
            "loss of random batches (softmax, the proxy losses)"
        )


def check_m_divides(cfg: RunConfig) -> None:
    """A class-balanced batch is classes x m: an m that does not divide the batch is refused
    (as pytorch-metric-learning's MPerClassSampler does), not silently raised."""
    if cfg.batch_size % cfg.m_per_class == 0 or cfg.batch_size < 2 * cfg.m_per_class:
        return  # the latter: a batch of one class, refused as such
    divisors = [m for m in range(2, cfg.batch_size // 2 + 1) if cfg.batch_size % m == 0]
    near = sorted(divisors, key=lambda m: abs(m - cfg.m_per_class))[:3]
    below = cfg.batch_size - cfg.batch_size % cfg.m_per_class
    sizes = [b for b in (below, below + cfg.m_per_class) if b >= 2 * cfg.m_per_class]
    raise ValueError(
        f"--m-per-class {cfg.m_per_class} does not divide --batch-size {cfg.batch_size} (a "
        f"class-balanced batch is classes x m): give a --m-per-class of "
        f"{' or '.join(map(str, sorted(near)))}, or a --batch-size of "
        f"{' or '.join(map(str, sizes or [2 * cfg.m_per_class]))}"
    )


def smaller_m(cfg: RunConfig) -> str:
    """', or --m-per-class M': the largest M > 1 that gives this batch two classes, if any."""
    fits = [m for m in range(2, cfg.batch_size // 2 + 1) if cfg.batch_size % m == 0]
    return f", or a --m-per-class of {max(fits)}" if fits else ""


def where_classes_go(cfg: RunConfig) -> str:
    """Why a split has so few classes, where the protocol explains it."""
    if cfg.dataset.startswith(FEATURES_PREFIX):
        return " (a features file's splits are its own: its rows' split and labels)"
    note = get_protocol(cfg.protocol).classes_note
    return f" (the {cfg.protocol} protocol {note})" if note else ""


def classes_text(n: int) -> str:
    return f"{n} class" if n == 1 else f"{n} classes"


def check_validation(cfg: RunConfig, data: DataSplits) -> None:
    """A one-line error when the validation split cannot rank: MAP@R needs a class with two
    items, or every epoch's score is NaN; or when the protocol needs a validation split."""
    protocol = get_protocol(cfg.protocol)
    if cfg.val_fraction == 0 and protocol.needs_validation:
        raise ValueError(
            f"the {cfg.protocol} protocol {protocol.needs_validation}; "
            "give it a --val-fraction above 0"
        )
    if not len(data.val) and cfg.val_fraction == 0:
        return  # no validation asked for: the last epoch is tested
    counts = class_counts(data.val.labels)
    if protocol.validation_ranks and not (counts >= 2).any():
        raise ValueError(
            f"the validation split of {cfg.dataset} has {len(data.val)} items and no class with "
            "two, so it cannot choose an epoch; use a data set with more images per class"
            + (", or --val-split classes" if protocol.class_validation else "")
        )
    if protocol.validation_ranks and len(counts) == 1:
        raise ValueError(
            f"the validation split of {cfg.dataset} holds {len(data.val)} items of 1 class: "
            "every neighbour is of its class, so MAP@R reads 1.0 at every epoch and cannot "
            "choose one; give it items of two classes or more (a larger --val-fraction"
            + (", or --val-split classes" if protocol.class_validation else "")
            + "), or --val-fraction 0 to test the last epoch"
        )


def check_test(cfg: RunConfig, data: DataSplits) -> None:
    """A one-line error for a split that retrieval cannot score: with one class every item's
    neighbours are of its class (R@1 = NMI = MAP@R = 1.0), and with no class of two items no
    query has a neighbour of its class to find. The pairs protocol's unseen split too."""
    splits = {"test": data.test, "unseen": data.unseen}
    for name, split in splits.items():
        if split is not None:
            where = where_classes_go(cfg)
            check_scorable(f"the {name} split of {cfg.dataset}", split.labels, where)


def check_scorable(split: str, labels, where: str = "") -> None:
    """A one-line error for labels whose retrieval means nothing: one class, or no class of two
    items (`check_test`; `linear`'s feature files too)."""
    counts = class_counts(labels)
    if len(counts) < 2:
        raise ValueError(
            f"{split} holds {len(labels)} items of {classes_text(len(counts))}: retrieval needs "
            f"two at least (with one, R@1, NMI and MAP@R all read 1.0){where}; use a data set "
            "with more classes"
        )
    if not (counts >= 2).any():
        raise ValueError(
            f"{split} has {len(labels)} items and no class with two: no query has an item of "
            "its class to find, so R@K and MAP@R mean nothing; use a data set with more images "
            "per class"
        )


def check_trained_classes(cfg: RunConfig, data: DataSplits) -> None:
    """A classifier knows the training classes only: under a protocol that scores one, a
    one-line error for a validation or test class without a training image (the classifier's
    scores would index a class it does not have)."""
    why = get_protocol(cfg.protocol).trained_classes
    if not why:
        return
    trained = set(np.unique(np.asarray(data.train.labels)).tolist())
    for name, split in (("validation", data.val), ("test", data.test)):
        missing = sorted(set(np.unique(np.asarray(split.labels)).tolist()) - trained)
        if not missing:
            continue
        named = [data.class_names[c] for c in missing if c < len(data.class_names)]
        which = f"class {named[0]!r}" if len(named) == 1 else classes_text(len(missing))
        raise ValueError(
            f"the {cfg.protocol} protocol {why}, and "
            f"{which} of the {name} split of {cfg.dataset} {'has' if len(missing) == 1 else 'have'}"
            " no training image; give each class training images (a features file: rows of "
            "split 'train'), or leave the class out"
        )
