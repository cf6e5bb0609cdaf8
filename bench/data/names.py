"""Prefixes of the data set names that point at a path."""

from __future__ import annotations

FEATURES_PREFIX = "features:"  # a data set of cached feature vectors (feature_files.py)
FOLDER_PREFIX = "folder:"
