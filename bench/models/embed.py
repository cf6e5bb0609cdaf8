"""Embedding a whole data split with a model, in order, in evaluation mode."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

from bench.util.batches import split_loader, to_inputs
from bench.util.runtime import synchronize

BATCH = 256
PROGRESS_FROM = 50  # batches: a progress bar while embedding a split this large
# Batches copied to the host before `embed` waits for them: the GPU waits for the host once
# every so many batches, not after each, and the pinned memory they take stays this small.
COPIES_IN_FLIGHT = 8


def embedding_loader(dataset: Dataset, device: torch.device, workers: int = 0) -> DataLoader:
    """The loader `embed` reads a split with, in order (one a caller may keep for the run)."""
    return split_loader(dataset, device, workers, batch_size=BATCH, shuffle=False)


@torch.no_grad()
def embed(
    model: torch.nn.Module,
    dataset: Dataset,
    device: torch.device,
    normalize: bool = False,
    features: bool = False,
    workers: int = 0,
    loader: DataLoader | None = None,
) -> tuple[torch.Tensor, np.ndarray]:
    """Embeddings (or the backbone's `features`) of a whole split in eval mode, in order; read
    with `loader` where given (an `embedding_loader` of the split), else a new one."""
    model.eval()
    forward = model.features if features else model
    loader = loader or embedding_loader(dataset, device, workers)
    batches = tqdm(loader, desc="embedding", leave=False, disable=len(loader) < PROGRESS_FROM)
    parts, copies = [], []
    for x, _, _ in batches:
        # To the host without waiting (into pinned memory, on a GPU): the GPU has the next
        # batches queued while the copies are under way.
        copies.append(forward(to_inputs(dataset, x, device)).float().to("cpu", non_blocking=True))
        if len(copies) == COPIES_IN_FLIGHT:
            parts.append(settled(copies, device))
    if copies or not parts:
        parts.append(settled(copies, device))
    emb = torch.cat(parts)
    if normalize:
        emb = F.normalize(emb, dim=1)
    return emb, np.asarray(dataset.labels)


def settled(copies: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    """The batches copied so far, once their copies are done, as one tensor in pageable
    memory; their pinned memory is free again for the next batches."""
    synchronize(device)
    done = torch.cat(copies)
    copies.clear()
    return done
