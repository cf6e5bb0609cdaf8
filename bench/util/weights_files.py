"""What a local weights file is, read from its bytes: its format and its sha256 (what a run
records of the weights it started from, and checks its provenance and finished runs by)."""

from __future__ import annotations

import functools
import os
from pathlib import Path

from bench.util.hashing import file_sha256

SAFETENSORS = "safetensors"
TORCH = "torch state dict"
HEADER_LENGTH = 8  # bytes: a safetensors file opens with its JSON header's length


def weights_format(path: str | Path) -> str:
    """SAFETENSORS for a safetensors file (its header's length, then the JSON header), else
    TORCH (what torch.save writes: a zip archive or a pickle)."""
    with open(path, "rb") as f:
        head = f.read(HEADER_LENGTH + 1)
    length = int.from_bytes(head[:HEADER_LENGTH], "little")
    fits = len(head) > HEADER_LENGTH and length < os.path.getsize(path)
    return SAFETENSORS if fits and head[HEADER_LENGTH:] == b"{" else TORCH


def weights_sha256(path: str | Path) -> str:
    """The file's sha256, read once for each size and modification time of it: every run of a
    grid started from one weights file checks it (a finished run's skip, its provenance, its
    record), and a ViT's or a ResNet-50's is hundreds of MB."""
    stat = os.stat(path)
    return _sha256(str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    return file_sha256(path)
