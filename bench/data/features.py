"""Feature vectors of a data set for Sharma et al. 2015's methods: a features file
(`feature_files`), or the raw inputs of digits. `load_features("digits")` gives the raw 8x8 pixels
of the digits protocol instead, so that the feature methods run without any extraction."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.data.datasets import load_dataset
from bench.data.feature_files import FeatureSplits, load_feature_file
from bench.data.names import FEATURES_PREFIX
from bench.protocols import DEFAULT_PROTOCOL


def digits_features(protocol: str = DEFAULT_PROTOCOL) -> FeatureSplits:
    """The raw pixels (64 values in [0, 1]) of digits: under the metric protocol classes 0-4
    train (20 % of them validation), 5-9 test; under classify every class in every split."""
    data = load_dataset("digits", protocol)
    parts = []
    for split in (data.train_eval, data.val, data.test):
        parts += [split.inputs().astype(np.float32), np.asarray(split.labels, dtype=np.int64)]
    return FeatureSplits("digits", *parts)


def load_features(
    dataset: str, data_root: Path | None = None, protocol: str = DEFAULT_PROTOCOL
) -> FeatureSplits:
    """`digits` (raw pixels, split by `protocol`) or `features:PATH.npz` (a file of
    `nngk-bench features`, or the user's own, with its own split) as train / val / test
    feature splits. `data_root` is for data sets read from images, none served here yet."""
    if dataset == "digits":
        return digits_features(protocol)
    if dataset.startswith(FEATURES_PREFIX):
        return load_feature_file(dataset)
    raise ValueError(
        f"no features for {dataset!r}; expected 'digits' or '{FEATURES_PREFIX}PATH.npz' "
        f"(extract them with `nngk-bench features --dataset {dataset}`)"
    )
