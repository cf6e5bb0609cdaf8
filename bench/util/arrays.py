"""Small array helpers shared across floors."""

from __future__ import annotations

import numpy as np


def l2_normalised(x: np.ndarray) -> np.ndarray:
    """Each row of x (as float32) scaled to unit length; a row of zeros stays zeros."""
    x = np.asarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


CHUNK_VALUES = 1 << 22  # values held in memory at once (32 MiB of float64)


def chunks(count: int, width: int, values: int = CHUNK_VALUES) -> list[slice]:
    """Slices of `count` rows of `width` values, about `values` values each."""
    step = max(1, values // max(width, 1))
    return [slice(s, s + step) for s in range(0, count, step)]


def row_chunks(x) -> list[slice]:
    """Slices of the rows of `x` (an array or a tensor) holding about CHUNK_VALUES values each."""
    return chunks(len(x), x.shape[1])
