"""Small array helpers shared across floors; the generic ones take numpy arrays or torch
tensors alike (`namespace`), so that a computation written once runs on the CPU in numpy,
to the bit as before, or in torch on a run's device."""

from __future__ import annotations

from types import ModuleType

import numpy as np
import torch


def l2_normalised(x: np.ndarray) -> np.ndarray:
    """Each row of x (as float32) scaled to unit length; a row of zeros stays zeros."""
    x = np.asarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


Array = np.ndarray | torch.Tensor  # what the generic helpers take
CHUNK_VALUES = 1 << 22  # values held in memory at once (32 MiB of float64)


def chunk_rows(width: int, values: int = CHUNK_VALUES, most: int | None = None) -> int:
    """Rows of `width` values each that a chunk of about `values` values holds: at least one,
    at most `most` where given."""
    rows = max(1, values // max(width, 1))
    return rows if most is None else min(most, rows)


def chunks(count: int, width: int, values: int = CHUNK_VALUES) -> list[slice]:
    """Slices of `count` rows of `width` values, about `values` values each."""
    step = chunk_rows(width, values)
    return [slice(s, s + step) for s in range(0, count, step)]


def row_chunks(x) -> list[slice]:
    """Slices of the rows of `x` (an array or a tensor) holding about CHUNK_VALUES values each."""
    return chunks(len(x), x.shape[1])


def namespace(a: Array) -> ModuleType:
    """The module whose functions take `a`: torch for a tensor, numpy otherwise. numpy and
    torch share the names used here (asarray, zeros, full, arange, cumsum, linalg.eigvalsh,
    with axis= and device=)."""
    return torch if isinstance(a, torch.Tensor) else np


def host(a: Array) -> np.ndarray:
    """`a` as a numpy array on the host (a tensor copied from its device)."""
    return a.cpu().numpy() if isinstance(a, torch.Tensor) else a


def like(a: np.ndarray, x: Array) -> Array:
    """The numpy array `a` as an array of x's kind: a tensor on x's device where x is one."""
    return torch.from_numpy(np.asarray(a)).to(x.device) if isinstance(x, torch.Tensor) else a


def add_rows(sums: Array, codes: Array, values: Array) -> None:
    """sums[codes[i]] += values[i] for every i, repeated codes included, in place."""
    if isinstance(sums, torch.Tensor):
        sums.index_add_(0, codes, values)
    else:
        np.add.at(sums, codes, values)
