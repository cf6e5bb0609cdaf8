"""The random-resized crop's area range (`--crop-scale LOW,HIGH`), read without torch so that
the command line checks it before anything is loaded."""

from __future__ import annotations

import math

DEFAULT_SCALE = (0.08, 1.0)  # torchvision's RandomResizedCrop


def parse_crop_scale(text: str) -> tuple[float, float]:
    """'0.16,1' -> (0.16, 1.0); '' -> torchvision's (0.08, 1.0); a one-line ValueError unless
    0 < LOW <= HIGH <= 1."""
    if not text:
        return DEFAULT_SCALE
    try:
        low, high = (float(v) for v in text.split(","))
    except ValueError:
        low = high = math.nan
    if not 0 < low <= high <= 1:  # NaN fails every comparison
        raise ValueError(
            f"bad --crop-scale {text!r}; expected LOW,HIGH, shares of the image's area with "
            "0 < LOW <= HIGH <= 1, e.g. 0.16,1"
        )
    return low, high
