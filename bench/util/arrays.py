"""Small array helpers shared across floors."""

from __future__ import annotations

import numpy as np


def l2_normalised(x: np.ndarray) -> np.ndarray:
    """Each row of x (as float32) scaled to unit length; a row of zeros stays zeros."""
    x = np.asarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
