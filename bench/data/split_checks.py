"""What a data set must hold for a split to be made, each as a one-line ValueError naming
the class that falls short and what to do: validation and test shares of each class's images,
and the classify protocol's test classes among its training ones."""

from __future__ import annotations

import numpy as np

TESTED = ("test", "query", "gallery")  # the statuses of a published split's tested images


def scarce_class(labels: np.ndarray, fraction: float) -> tuple[int, int] | None:
    """(the class with the fewest images, their number) when a stratified share of `fraction`
    of these images cannot hold every class in both parts (scikit-learn would refuse it, naming
    label indices); None when it can."""
    classes, counts = np.unique(labels, return_counts=True)
    n_share = int(np.ceil(fraction * len(labels)))
    if counts.min() >= 2 and n_share >= len(classes) and len(labels) - n_share >= len(classes):
        return None
    return classes[counts.argmin()].item(), int(counts.min())


def images_needed(fraction: float) -> int:
    """Images per class with which a stratified share of `fraction` holds every class."""
    return max(2, int(np.ceil(1 / fraction)), int(np.ceil(1 / (1 - fraction))))


def class_text(label: int, names: dict | None) -> str:
    """'class 3', or the class's name where the data set names its classes (a folder's)."""
    return f"class {names[label]!r}" if names and label in names else f"class {label}"


def check_stratifiable(
    labels: np.ndarray, fraction: float, names: dict | None = None, classes_allowed: bool = True
) -> None:
    """A one-line ValueError, in place of scikit-learn's, when a stratified share of these
    images cannot hold every class in both parts: how many images per class that needs."""
    found = scarce_class(labels, fraction)
    if found is None:
        return
    label, count = found
    raise ValueError(
        f"a validation split of {fraction:g} of the training images needs at least "
        f"{images_needed(fraction)} images in each of the {len(np.unique(labels))} training "
        f"classes; {class_text(label, names)} has {count}; use "
        + ("--val-split classes (whole classes held out), " if classes_allowed else "")
        + "another --val-fraction, or --val-fraction 0 (no validation: the last epoch is tested)"
    )


NO_TEST_SPLIT = (
    "the data set has no test split, so {share} of each class's images are held out to test",
    "add images to it or leave it out of the data set (a folder: move its sub-folder out)",
)
PAIRS_SEEN_TEST = (
    "the pairs protocol tests its seen classes (the first half of the classes) on {share} of "
    "each one's images, whatever split the data set publishes",
    "use --protocol metric, or a data set with more images a class",
)


def check_test_share(
    labels: np.ndarray, fraction: float, names: dict | None, why: tuple[str, str] = NO_TEST_SPLIT
) -> None:
    """A one-line ValueError when `fraction` of each class's images cannot be held out to
    test: `why` they are (a format string of {share}), the class that has too few, and what
    to do."""
    found = scarce_class(labels, fraction)
    if found is None:
        return
    label, count = found
    held, advice = why
    raise ValueError(
        f"{held.format(share=f'{fraction:.0%}')}: that needs at least "
        f"{images_needed(fraction)} images in each of the {len(np.unique(labels))} classes, "
        f"and {class_text(label, names)} has {count}; {advice}"
    )


def check_trained_test_classes(labels: np.ndarray, split: np.ndarray) -> None:
    """A one-line ValueError when the classify protocol would test classes it never trains: a
    published test split of other classes (Stanford Online Products', In-Shop's)."""
    train, tested = split == "train", np.isin(split, TESTED)
    missing = np.setdiff1d(labels[tested], labels[train])
    if train.any() and len(missing):
        raise ValueError(
            "the classify protocol tests the classes it trains, and "
            f"{len(missing)} of the {len(np.unique(labels[tested]))} classes of this data "
            "set's published test split have no training image (its test classes are unseen "
            "ones, for retrieval): use --protocol metric"
        )
