"""Embedding a whole data split with a model, in order, in evaluation mode."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset
from tqdm import tqdm

from bench.util.batches import split_loader, to_inputs

PROGRESS_FROM = 50  # batches of 256: a progress bar while embedding a split this large


@torch.no_grad()
def embed(
    model: torch.nn.Module,
    dataset: Dataset,
    device: torch.device,
    normalize: bool = False,
    features: bool = False,
    workers: int = 0,
) -> tuple[torch.Tensor, np.ndarray]:
    """Embeddings (or the backbone's `features`) of a whole split in eval mode, in order."""
    model.eval()
    forward = model.features if features else model
    loader = split_loader(dataset, device, workers, batch_size=256, shuffle=False)
    batches = tqdm(loader, desc="embedding", leave=False, disable=len(loader) < PROGRESS_FROM)
    out = [forward(to_inputs(dataset, x, device)).float().cpu() for x, _, _ in batches]
    emb = torch.cat(out)
    if normalize:
        emb = F.normalize(emb, dim=1)
    return emb, np.asarray(dataset.labels)
