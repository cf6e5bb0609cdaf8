"""The process's device, seeds and package versions."""

from __future__ import annotations

import platform
import random
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version

import numpy as np
import torch

PACKAGES = ("torch", "torchvision", "pytorch-metric-learning", "faiss-cpu", "numpy", "nngk-bench")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@contextmanager
def deterministic_cpu(device: torch.device) -> Iterator[None]:
    """torch's deterministic kernels while a run on the CPU trains, restored after (issue 69).

    On more than one thread torch's CPU backward of gathered rows (`x[i]`, index_put with
    accumulate) adds the rows' gradients in parallel, in whatever order the threads reach them:
    triplet-nca, angular, bce-pair and two PML losses then differ between two identical runs.
    The deterministic kernels add them in one fixed order, the order of one thread, so results
    on one thread are unchanged (docs/speed.md, "Deterministic kernels", for their cost). An op
    with no deterministic kernel warns instead of stopping the run (warn_only), naming itself.
    On a GPU nothing changes: cuDNN is not bit-deterministic anyway, and cuBLAS would need
    CUBLAS_WORKSPACE_CONFIG set before its first use."""
    if torch.device(device).type != "cpu":
        yield
        return
    before = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


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
