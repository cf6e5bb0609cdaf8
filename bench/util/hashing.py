"""A file's sha256, read in blocks: what names a weights file, a run's embeddings behind their
scores, and the weights `nngk-bench pretrain` writes."""

import hashlib
from pathlib import Path


def file_sha256(path: str | Path) -> str:
    """The hex sha256 of the file's bytes, read a MiB at a time (a weights file may be
    hundreds of MB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
