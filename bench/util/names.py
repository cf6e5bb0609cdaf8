"""Names that become file names."""

from __future__ import annotations

import re


def safe_name(dataset: str) -> str:
    """A data set's name as a file name ('folder:/data/x' -> 'folder-data-x')."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", dataset.rstrip("/"))
