"""Prefixes of the data set names that point at a path, the pretraining source's name, and the
short hash of a data set's identity that tells its tables and studies apart."""

from __future__ import annotations

import hashlib

FEATURES_PREFIX = "features:"  # a data set of cached feature vectors (feature_files.py)
FOLDER_PREFIX = "folder:"
# `nngk-bench pretrain`'s source: glyphs classes 1000-1999, none of the benchmark's 0-199.
PRETRAIN_SOURCE = "glyphs:first=1000,classes=1000"
GLYPHS_NAME = "glyphs"
EMOJI_NAME = "emoji"
# The data sets read from their official layouts (datasets.py READERS is derived from it).
READER_NAMES = (
    "cars196",
    "cub",
    "tinyimagenet",
    "flowers102",
    "leafsnap",
    "sop",
    "inshop",
    "inaturalist",
)


def is_glyphs(name: str) -> bool:
    return name == GLYPHS_NAME or name.startswith(GLYPHS_NAME + ":")


def is_emoji(name: str) -> bool:
    return name == EMOJI_NAME or name.startswith(EMOJI_NAME + ":")


def is_built_in(name: str) -> bool:
    """Whether the data set is one of the harness's own (digits, glyphs, emoji), whose images
    it makes at the size their name gives: never resized or cropped."""
    return name == "digits" or is_glyphs(name) or is_emoji(name)


def resizes_images(dataset: str) -> bool:
    """Whether the data set's images are resized and cropped (the built-in sets and feature
    files are used as they are)."""
    return not (is_built_in(dataset) or dataset.startswith(FEATURES_PREFIX))


def dataset_names() -> list[str]:
    """Every data set `--dataset` takes, as the help and the errors show them."""
    return [
        "digits",
        *sorted(READER_NAMES),
        "glyphs[:classes=N,instances=N,size=N,seed=N,difficulty=X,first=N]",
        "emoji[:size=N,min_sets=N,sets=NAME+NAME,classes=N,held_out=NAME+NAME]",
        f"{FOLDER_PREFIX}PATH",
        f"{FEATURES_PREFIX}PATH.npz",
    ]


def check_dataset_name(name: str) -> None:
    """A ValueError naming the data sets, the nearest first, for a name that is none of them
    (a glyphs set's parameters are checked where it is made)."""
    from bench.util.errors import did_you_mean

    if name == FOLDER_PREFIX:  # the current folder, silently, before
        raise ValueError(f"--dataset {name} names no folder; give {name}PATH ({name}. for here)")
    if name == FEATURES_PREFIX:
        raise ValueError(f"--dataset {name} names no file; give {name}FILE.npz")
    known = name in READER_NAMES or is_built_in(name)
    if known or name.startswith((FOLDER_PREFIX, FEATURES_PREFIX)):
        return
    close = did_you_mean(name, ["digits", GLYPHS_NAME, EMOJI_NAME, *READER_NAMES])
    raise ValueError(
        f"unknown data set {name!r}{close}; expected one of: {', '.join(dataset_names())}"
    )


def identity_hash(location: str, fingerprint: str) -> str:
    """A short hash of a data set's identity, its resolved location and fingerprint: what
    tells its report tables and its tune studies apart from those of other data."""
    return hashlib.sha1(f"{location}\n{fingerprint}".encode()).hexdigest()[:8]
