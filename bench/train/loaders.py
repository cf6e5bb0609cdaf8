"""What feeds the trainer: a run's data splits and each epoch's batches."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch
from pytorch_metric_learning.samplers import MPerClassSampler
from torch.utils.data import BatchSampler, DataLoader, RandomSampler

from bench.data.datasets import DataSplits, load_dataset
from bench.data.identity import data_identity
from bench.runs.config import RunConfig
from bench.train.distributed import ONE_PROCESS, Ranks, RankSlices
from losses import BenchLoss


def balanced_m(batch_size: int, m: int, num_classes: int) -> int:
    """The smallest m' >= m dividing the batch with m' * classes >= batch (MPerClassSampler)."""
    for cand in range(max(m, -(-batch_size // num_classes)), batch_size + 1):
        if batch_size % cand == 0:
            return cand
    return batch_size


def input_size(data: DataSplits) -> str:
    """What the network is given, e.g. '1x28x28' (channels x height x width) or '4096'."""
    return "x".join(str(n) for n in data.test[0][0].shape) if len(data.test) else ""


def per_class(cfg: RunConfig, labels: np.ndarray) -> int:
    """Examples of a class in a class-balanced batch of these training labels."""
    return balanced_m(cfg.batch_size, cfg.m_per_class, len(np.unique(labels)))


def sampler_text(cfg: RunConfig, loss: BenchLoss, data: DataSplits) -> str:
    """How training batches are drawn, e.g. '16 classes x 4' or 'random'."""
    if not loss.class_balanced:
        return "random"
    m = per_class(cfg, np.asarray(data.train.labels))
    return f"{cfg.batch_size // m} classes x {m}"


def epoch_loader(
    cfg: RunConfig, loss: BenchLoss, data: DataSplits, seed: int, ranks: Ranks = ONE_PROCESS
) -> DataLoader:
    """A fresh loader per epoch, seeded by the epoch, so a resumed run sees the same batches;
    with several processes, this one's slice of each batch."""
    labels = np.asarray(data.train.labels)
    if cfg.batch_size > len(labels):  # drop_last would leave no batch at all
        raise ValueError(
            f"batch size {cfg.batch_size} exceeds the {len(labels)} training items of "
            f"{cfg.dataset}; give a smaller --batch-size"
        )
    if loss.class_balanced:
        m = per_class(cfg, labels)
        # A new sampler each epoch: MPerClassSampler shuffles its label list in place.
        sampler = MPerClassSampler(labels, m, cfg.batch_size, length_before_new_iter=len(labels))
    else:
        gen = torch.Generator().manual_seed(seed)
        sampler = RandomSampler(data.train, generator=gen)
    batches = BatchSampler(sampler, cfg.batch_size, drop_last=True)
    if ranks.world > 1:
        batches = RankSlices(batches, ranks)
    return DataLoader(data.train, batch_sampler=batches, num_workers=cfg.workers)


def load_data(cfg: RunConfig) -> DataSplits:
    return load_dataset(
        cfg.dataset,
        cfg.protocol,
        cfg.val_fraction,
        data_root=cfg.data_root or None,
        resize=cfg.resize,
        crop=cfg.crop,
        pad=cfg.pad,
        train_per_class=cfg.train_per_class,
        val_split=cfg.val_split,
    )


def with_data_identity(configs: list[RunConfig]) -> list[RunConfig]:
    """The configs with their data's location and fingerprint, which are part of a run's
    identity: a run on another folder, or on changed files, is another run."""
    found: dict[tuple[str, str], dict[str, str]] = {}
    for cfg in configs:
        key = (cfg.dataset, cfg.data_root)
        if key not in found:
            found[key] = data_identity(*key)
    return [replace(cfg, **found[(cfg.dataset, cfg.data_root)]) for cfg in configs]
