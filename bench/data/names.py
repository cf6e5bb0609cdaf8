"""Prefixes of the data set names that point at a path."""

from __future__ import annotations

FEATURES_PREFIX = "features:"  # a data set of cached feature vectors (bench/features.py)
FOLDER_PREFIX = "folder:"
