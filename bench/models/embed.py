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
    # Copied to the host without waiting (into pinned memory, on a GPU), so that the GPU has
    # the next batch queued while a batch's copy is under way; read once all are done.
    out = [
        forward(to_inputs(dataset, x, device)).float().to("cpu", non_blocking=True)
        for x, _, _ in batches
    ]
    synchronize(device)
    emb = torch.cat(out)
    if normalize:
        emb = F.normalize(emb, dim=1)
    return emb, np.asarray(dataset.labels)
