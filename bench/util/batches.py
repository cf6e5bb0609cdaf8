"""Batches of a data split on their way to the network: the split's own collate (cached images
come as uint8, padded together), pinned memory and asynchronous copies for a GPU, and the
split's `prepare` (cached images are cropped there, on the device)."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, Dataset


def split_loader(dataset: Dataset, device: torch.device, workers: int = 0, **options) -> DataLoader:
    """A DataLoader of `dataset` (`options`: batch_size, shuffle or batch_sampler, ...)."""
    keep_workers = workers > 0 and getattr(dataset, "deterministic_items", False)
    return DataLoader(
        dataset,
        num_workers=workers,
        collate_fn=getattr(dataset, "collate", None),
        pin_memory=torch.device(device).type == "cuda",
        persistent_workers=keep_workers,  # nothing random in a worker to re-seed each epoch
        **options,
    )


def to_inputs(
    dataset: Dataset, x, device: torch.device, generator: torch.Generator | None = None
) -> torch.Tensor:
    """A loaded batch as the network's input on `device`."""
    x = x.to(device, non_blocking=True)
    prepare = getattr(dataset, "prepare", None)
    return prepare(x, generator) if prepare is not None else x
