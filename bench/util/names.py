"""Names that become file names."""

from __future__ import annotations

import hashlib
import re


def safe_name(dataset: str) -> str:
    """A name as a file name ('folder:/data/x' -> 'folder-data-x'); names of letters, digits,
    '_', '.' and '-' as they are."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", dataset.rstrip("/"))


NAME_MAX = 255  # bytes in one file or folder name (Linux, macOS)


def fitted_name(head: str, tail: str, room: int = NAME_MAX) -> str:
    """f"{head}-{tail}", a file name; where that is longer than `room` bytes, `head` cut and
    followed by a hash of it, so that the name fits and two long heads stay apart. Names that
    fit are as they were (run ids never change)."""
    name = f"{head}-{tail}"
    if len(name.encode()) <= room:
        return name
    tag = hashlib.sha1(head.encode()).hexdigest()[:8]
    keep = max(room - len(tail.encode()) - len(tag) - 2, 0)
    short = head.encode()[:keep].decode(errors="ignore")
    return f"{short}-{tag}-{tail}"
