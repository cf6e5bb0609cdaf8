"""The source documents' three splits of a data set's image table, one per protocol that
trains (`bench.protocols` names the split each protocol takes):

- metric (Meyer et al. 2018, §3.1): train on the first half of the classes (sorted by class
  id), test on the rest; validation carved out of the training images. A data set whose
  published split already tests on classes it never trains on (Stanford Online Products,
  iNaturalist 2018: splits "train" and "test" with no class in both) keeps that split.
- classify (Meyer et al. 2018, §3.2): the same classes everywhere; the data set's official split
  where it has one, validation carved from its training images where it has none (CUB 20 %,
  Cars196 30 %); 50/20/30 where there is no official split at all (Leafsnap field images).
- pairs (the Tiny ImageNet pair-verification report): the first half of the classes are seen;
  their training images give the training and validation splits, their official validation
  images the test split; the other half are unseen, evaluated on their official validation
  images.
- query-gallery (In-Shop, Liu et al. 2016): the published training images train (validation
  carved from them), the query and gallery images test, with the queries flagged.
- cross-style (the emoji sets): the metric protocol's halves of the classes, without the
  held-out styles' images in training; the test classes' held-out images are queries searched
  in the other styles' images.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from bench.data.split_checks import (
    NO_TEST_SPLIT,
    PAIRS_SEEN_TEST,
    check_stratifiable,
    check_test_share,
    check_trained_test_classes,
)
from bench.protocols import Protocol, get_protocol, trained_protocols

if TYPE_CHECKING:  # pandas and scikit-learn load when a split is made, not for `run --help`
    import pandas as pd

PROTOCOLS = trained_protocols()  # the choices of `run --protocol`
SPLIT_SEED = 0  # the splits are the same for every run seed
QUERY = "query"  # In-Shop's status of a query image (its others: train, gallery)
QUERY_GALLERY = "query-gallery"  # the split of data sets whose test has queries and a gallery


@dataclass(frozen=True)
class Splits:
    """Positions into an image table; `unseen` only for the pairs protocol; `queries` only for
    the query-gallery protocol: for each test position, whether it is a query (else a gallery
    image)."""

    train: np.ndarray
    val: np.ndarray
    test: np.ndarray
    unseen: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    queries: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))


def carve_validation(
    labels: np.ndarray,
    fraction: float,
    by_classes: bool = False,
    fold: tuple[int, int] | None = None,
    names: dict | None = None,
    classes_allowed: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """(train, validation) positions within a training split: a stratified share of the images
    (fixed seed), or, `by_classes`, every image of the last classes (at least two, a `fraction`
    of them), so that validation, like the metric protocol's test, has classes never trained on
    (Musgrave et al. 2020); `fold` (f, k) holds out the f-th of k groups of the classes instead
    (shuffled with a fixed seed), for k-fold cross-validation over classes. `names`: the
    classes' names by label, for the errors, which name `--val-split classes` only where the
    protocol takes it (`classes_allowed`)."""
    positions = np.arange(len(labels))
    if fold is not None:
        return class_fold(labels, *fold)
    if fraction <= 0:
        return positions, positions[:0]
    if by_classes:
        classes = np.unique(labels)
        held = max(2, round(fraction * len(classes)))
        if len(classes) - held < 2:
            raise ValueError(
                f"a class-disjoint validation split (--val-split classes) needs at least 4 "
                f"training classes, 2 to validate on and 2 to train on; got {len(classes)}: "
                "use more classes (e.g. a larger classes= of glyphs or emoji), --val-split "
                "images, or --val-fraction 0 (no validation: the last epoch is tested)"
            )
        val = np.isin(labels, classes[-held:])
        return positions[~val], positions[val]
    check_stratifiable(labels, fraction, names, classes_allowed)
    return stratified_share(labels, fraction)


def stratified_share(labels: np.ndarray, fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """(rest, share) positions: a `fraction` of each class's images in the share, fixed seed."""
    from sklearn.model_selection import train_test_split

    rest, share = train_test_split(
        np.arange(len(labels)), test_size=fraction, stratify=labels, random_state=SPLIT_SEED
    )
    return np.sort(rest), np.sort(share)


def class_fold(labels: np.ndarray, fold: int, folds: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, validation) positions: validation is the `fold`-th of `folds` groups of the
    classes, shuffled with a fixed seed; every class is validated in exactly one fold."""
    classes = np.random.default_rng(SPLIT_SEED).permutation(np.unique(labels))
    if len(classes) < 2 * folds or not 0 <= fold < folds:
        most = len(classes) // 2
        raise ValueError(
            f"fold {fold} of {folds} over {len(classes)} training classes: each fold needs two "
            f"classes at least, and 0 <= fold < folds (here {most} folds at most)"
        )
    held = np.array_split(classes, folds)[fold]
    val = np.isin(labels, held)
    positions = np.arange(len(labels))
    return positions[~val], positions[val]


def parse_val_split(val_split: str) -> tuple[bool, tuple[int, int] | None]:
    """(by classes, (fold, folds) or None) of 'images', 'classes' or 'classes:F/K'."""
    if val_split.startswith("classes:"):
        try:
            fold, folds = (int(n) for n in val_split.removeprefix("classes:").split("/"))
        except ValueError:
            raise ValueError(f"bad validation split {val_split!r}; expected classes:F/K") from None
        if folds < 2 or not 0 <= fold < folds:
            raise ValueError(
                f"bad validation split {val_split!r}: K folds (2 or more) numbered 0 to K-1"
            )
        return True, (fold, folds)
    return val_split == "classes", None


def class_names(table: pd.DataFrame) -> dict | None:
    """The table's class names by label (image data sets name them), for the errors."""
    if "class_name" not in table:
        return None
    return dict(zip(table["label"].tolist(), table["class_name"].astype(str).tolist(), strict=True))


def first_half_classes(labels: np.ndarray) -> np.ndarray:
    classes = np.unique(labels)
    return classes[: len(classes) // 2]


def published_class_split(table: pd.DataFrame) -> tuple[np.ndarray, np.ndarray] | None:
    """(train, test) positions of a data set whose published split tests on classes it never
    trains on (every image "train" or "test", no class in both: SOP, iNaturalist 2018); None
    for any other, whose classes the metric protocol splits in halves."""
    labels, split = table["label"].to_numpy(), table["split"].to_numpy()
    train, test = split == "train", split == "test"
    if not train.any() or not test.any() or not (train | test).all():
        return None
    if np.intersect1d(labels[train], labels[test]).size:
        return None
    return np.nonzero(train)[0], np.nonzero(test)[0]


def gallery_protocols() -> str:
    """The protocols that search a data set's published queries in its gallery, for the
    errors ('query-gallery'; not cross-style, whose queries are the held-out styles')."""
    return " or ".join(
        n
        for n in trained_protocols()
        if get_protocol(n).gallery and not get_protocol(n).held_out_styles
    )


def has_queries(table: pd.DataFrame) -> bool:
    """Whether the data set's published test searches query images in a gallery (In-Shop)."""
    return bool((table["split"] == QUERY).any())


def metric_splits(
    table: pd.DataFrame, val_fraction: float, by_classes: bool = False, fold=None
) -> Splits:
    if has_queries(table):
        raise ValueError(
            "this data set's published test searches query images in a separate gallery "
            f"(In-Shop), which the metric protocol does not: use --protocol {gallery_protocols()}"
        )
    labels = table["label"].to_numpy()
    published = published_class_split(table)
    if published is None:
        is_train = np.isin(labels, first_half_classes(labels))
        published = np.nonzero(is_train)[0], np.nonzero(~is_train)[0]
    train_all, test = published
    names = class_names(table)
    tr, va = carve_validation(labels[train_all], val_fraction, by_classes, fold, names)
    return Splits(train_all[tr], train_all[va], test)


def query_gallery_splits(
    table: pd.DataFrame, val_fraction: float, by_classes: bool = False, fold=None
) -> Splits:
    """The published training images train (validation carved from them, whole classes with
    `by_classes`), the query and gallery images test, in table order, the queries flagged."""
    labels, split = table["label"].to_numpy(), table["split"].to_numpy()
    queries, train = split == QUERY, split == "train"
    if not queries.any() or (queries | train).all():
        raise ValueError(
            f"the --protocol {gallery_protocols()} searches query images in a gallery: it needs "
            "a data set whose published split names training, query and gallery images "
            "(inshop); this one has no query or no gallery image: use --protocol metric"
        )
    train_all, test = np.nonzero(train)[0], np.nonzero(~train)[0]
    tr, va = carve_validation(labels[train_all], val_fraction, by_classes, fold, class_names(table))
    return Splits(train_all[tr], train_all[va], test, queries=queries[test])


def cross_style_splits(
    table: pd.DataFrame, val_fraction: float, by_classes: bool = False, fold=None
) -> Splits:
    """The first half of the classes train on the images not marked as queries (validation
    carved from them); the rest test, the marked images (a held-out style's) its queries and
    the others its gallery; the marked images of the training classes are never used."""
    labels, held = table["label"].to_numpy(), table["split"].to_numpy() == QUERY
    if not held.any() or held.all():
        raise ValueError(
            "the cross-style protocol queries images in styles held out of training: it needs "
            "a data set that names its images' styles and which are held out (e.g. "
            "--dataset emoji:held_out=twemoji+openmoji); use --protocol metric for this one"
        )
    trained = np.isin(labels, first_half_classes(labels))
    train_all, test = np.nonzero(trained & ~held)[0], np.nonzero(~trained)[0]
    tr, va = carve_validation(labels[train_all], val_fraction, by_classes, fold, class_names(table))
    return Splits(train_all[tr], train_all[va], test, queries=held[test])


def classify_splits(table: pd.DataFrame, val_fraction: float) -> Splits:
    labels, split = table["label"].to_numpy(), table["split"].to_numpy()
    if (split == "val").any() and not (split == "test").any():
        raise ValueError(
            "the data set publishes a validation split but no labelled test split (Tiny "
            "ImageNet's test images have no labels), which the classify protocol tests on; "
            "use another --protocol"
        )
    check_trained_test_classes(labels, split)
    if (split == "val").any():
        return Splits(*(np.nonzero(split == s)[0] for s in ("train", "val", "test")))
    if (split == "test").any():
        train_all, test = np.nonzero(split == "train")[0], np.nonzero(split == "test")[0]
    else:
        train_all, test = three_way(labels, names=class_names(table))
    tr, va = carve_validation(
        labels[train_all], val_fraction, names=class_names(table), classes_allowed=False
    )
    return Splits(train_all[tr], train_all[va], test)


def three_way(
    labels: np.ndarray,
    test_fraction: float = 0.3,
    names: dict | None = None,
    why: tuple[str, str] = NO_TEST_SPLIT,
) -> tuple[np.ndarray, np.ndarray]:
    """(train + validation, test) positions, stratified, fixed seed; `why` a test share is
    held out, for the error where it cannot be (`check_test_share`)."""
    check_test_share(labels, test_fraction, names, why)
    return stratified_share(labels, test_fraction)


def pairs_splits(table: pd.DataFrame, val_fraction: float) -> Splits:
    labels, split = table["label"].to_numpy(), table["split"].to_numpy()
    seen = np.isin(labels, first_half_classes(labels))
    if (split == "val").any():
        train_all = np.nonzero(seen & (split == "train"))[0]
        test = np.nonzero(seen & (split == "val"))[0]
        unseen = np.nonzero(~seen & (split == "val"))[0]
    else:
        seen_pos = np.nonzero(seen)[0]
        pool, test_rel = three_way(labels[seen_pos], 0.1, class_names(table), PAIRS_SEEN_TEST)
        train_all, test = seen_pos[pool], seen_pos[test_rel]
        unseen = np.nonzero(~seen)[0]
    tr, va = carve_validation(
        labels[train_all], val_fraction, names=class_names(table), classes_allowed=False
    )
    return Splits(train_all[tr], train_all[va], test, unseen)


VAL_SPLITS = ("images", "classes")


def check_val_split_name(val_split: str) -> bool:
    """Whether the split holds out whole classes; a one-line ValueError for one that is not
    images, classes or classes:F/K (0 <= F < K, K >= 2)."""
    by_classes, _ = parse_val_split(val_split)
    if val_split not in VAL_SPLITS and not by_classes:
        raise ValueError(
            f"unknown validation split {val_split!r}; expected one of: "
            f"{', '.join(VAL_SPLITS)}, classes:F/K"
        )
    return by_classes


def check_val_split(val_split: str, protocol: str) -> None:
    """A one-line ValueError for an unknown validation split, or whole classes held out under a
    protocol that tests the classes it trained on (all but metric)."""
    by_classes = check_val_split_name(val_split)
    if by_classes and not get_protocol(protocol).class_validation:
        allowed = [n for n in trained_protocols() if get_protocol(n).class_validation]
        plural = "s" if len(allowed) > 1 else ""
        listed = ", ".join(allowed[:-1]) + " and " * (len(allowed) > 1) + allowed[-1]
        raise ValueError(
            f"a class-disjoint validation split applies to the {listed} "
            f"protocol{plural} only (the {protocol} protocol tests classes it trained on)"
        )


# By the split's name, which each protocol declares (`Protocol.split`); a protocol that allows a
# class-disjoint validation split (`Protocol.class_validation`) takes a split with by_classes and
# fold.
SPLITTERS = {
    "metric": metric_splits,
    "classify": classify_splits,
    "pairs": pairs_splits,
    QUERY_GALLERY: query_gallery_splits,
    "cross-style": cross_style_splits,
}


def trained_protocol(name: str) -> type[Protocol]:
    """The declarations of a protocol that trains; a one-line ValueError for any other name."""
    names = trained_protocols()
    if name not in names:
        raise ValueError(f"unknown protocol {name!r}; expected one of: {', '.join(names)}")
    return get_protocol(name)


def make_splits(
    protocol: str,
    table: pd.DataFrame,
    val_fraction: float,
    train_per_class: int = 0,
    val_split: str = "images",
) -> Splits:
    """The protocol's splits; with `train_per_class`, at most that many training images per
    class (Meyer et al. 2018, Fig. 3), drawn with a fixed seed; val_split="classes" holds out
    whole training classes for validation (the metric protocol only)."""
    split = SPLITTERS[trained_protocol(protocol).split]
    check_val_split(val_split, protocol)
    by_classes, fold = parse_val_split(val_split)
    if by_classes:
        splits = split(table, val_fraction, by_classes=True, fold=fold)
    else:
        splits = split(table, val_fraction)
    if train_per_class:
        labels = table["label"].to_numpy()
        splits = replace(splits, train=limit_per_class(splits.train, labels, train_per_class))
    return splits


def limit_per_class(rows: np.ndarray, labels: np.ndarray, n: int) -> np.ndarray:
    rng = np.random.default_rng(SPLIT_SEED)
    keep = [rng.permutation(rows[labels[rows] == c])[:n] for c in np.unique(labels[rows])]
    return np.sort(np.concatenate(keep))


def training_classes_first(
    labels: np.ndarray, train_rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Class ids (any integers) renumbered so that the training rows' classes are 0..T-1 (what
    a classifier head needs) and the others follow, each in sorted order, and that order (the
    sorted class ids, the new number's class first): the sorted numbering where the training
    classes come first already, not where a class fold held out classes among them
    (`--val-split classes:F/K`)."""
    classes, numbered = np.unique(labels, return_inverse=True)
    seen = np.unique(numbered[train_rows])
    order = np.concatenate([seen, np.setdiff1d(np.arange(len(classes)), seen)])
    lookup = np.empty(len(order), dtype=np.int64)
    lookup[order] = np.arange(len(order))
    return lookup[numbered.reshape(-1)], order
