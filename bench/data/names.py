"""Prefixes of the data set names that point at a path, and the pretraining source's name."""

from __future__ import annotations

FEATURES_PREFIX = "features:"  # a data set of cached feature vectors (feature_files.py)
FOLDER_PREFIX = "folder:"
# `nngk-bench pretrain`'s source: glyphs classes 1000-1999, none of the benchmark's 0-199.
PRETRAIN_SOURCE = "glyphs:first=1000,classes=1000"
