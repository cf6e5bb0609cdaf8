"""The process's device, seeds and package versions."""

from __future__ import annotations

import platform
import random
from importlib.metadata import PackageNotFoundError, version

import numpy as np
import torch

PACKAGES = ("torch", "torchvision", "pytorch-metric-learning", "faiss-cpu", "numpy", "nngk-bench")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def package_versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            pass
    return found


def synchronize(device: torch.device) -> None:
    """Wait for a GPU's queued work (to time the work, not its launch); nothing on a CPU."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
