"""What feeds the trainer: a run's data splits and each epoch's batches."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch
from pytorch_metric_learning.samplers import MPerClassSampler
from torch.utils.data import BatchSampler, DataLoader, RandomSampler

from bench.data.datasets import DataSplits, load_run_data
from bench.data.identity import data_identity
from bench.models.backbones import input_normalization
from bench.models.embedding import network_input
from bench.runs.config import RunConfig
from bench.train.distributed import ONE_PROCESS, Ranks, RankSlices, check_divisible
from bench.util.batches import split_loader
from losses import BenchLoss

CPU = torch.device("cpu")


def balanced_m(batch_size: int, m: int, num_classes: int) -> int:
    """The smallest m' >= m dividing the batch with m' * classes >= batch (MPerClassSampler)."""
    for cand in range(max(m, -(-batch_size // num_classes)), batch_size + 1):
        if batch_size % cand == 0:
            return cand
    return batch_size


def input_size(data: DataSplits) -> str:
    """What the network is given, e.g. '3x224x224' (a timm ViT on 28-px glyphs: resized), where
    `load_data` recorded it; else the items' own shape (`item_size`)."""
    return data.network_input or item_size(data)


def item_size(data: DataSplits) -> str:
    """The shape of an item, e.g. '1x28x28' (channels x height x width), '3x224x224' (an image
    set's crops: its cached images, each of its own size, not its first) or '4096'."""
    if not len(data.test):
        return ""
    return "x".join(str(n) for n in item_shape(data))


def item_shape(data: DataSplits) -> tuple[int, ...]:
    crops = getattr(data.test, "crops", None)
    if crops is not None:
        return (3, crops.crop, crops.crop)
    return tuple(data.test[0][0].shape)


def per_class(cfg: RunConfig, labels: np.ndarray) -> int:
    """Examples of a class in a class-balanced batch of these training labels."""
    return balanced_m(cfg.batch_size, cfg.m_per_class, len(np.unique(labels)))


def sampler_text(cfg: RunConfig, loss: BenchLoss, data: DataSplits) -> str:
    """How training batches are drawn, e.g. '16 classes x 4' or 'random'."""
    if not loss.class_balanced:
        return "random"
    m = per_class(cfg, np.asarray(data.train.labels))
    return f"{cfg.batch_size // m} classes x {m}"


def split_counts(data: DataSplits) -> dict[str, dict[str, int]]:
    """Images and classes of each split, as the run read them (metrics.json: `split_counts`),
    so that a folder's left-out files or merged classes can be seen after the run."""
    return {
        name: {"images": len(split), "classes": len(np.unique(np.asarray(split.labels)))}
        for name, split in (("train", data.train), ("val", data.val), ("test", data.test))
    }


def raised_m_note(cfg: RunConfig, loss: BenchLoss, data: DataSplits) -> str | None:
    """Why a class-balanced batch holds more examples of a class than --m-per-class, if it
    does: too few training classes to fill it."""
    if not loss.class_balanced:
        return None
    labels = np.asarray(data.train.labels)
    m, classes = per_class(cfg, labels), len(np.unique(labels))
    if m == cfg.m_per_class:
        return None
    return (
        f"{cfg.m_per_class} examples a class raised to {m}: {classes} training classes x "
        f"{cfg.m_per_class} cannot fill a batch of {cfg.batch_size} (recorded as the sampler, "
        f"{cfg.batch_size // m} classes x {m})"
    )


def check_batch_fits(cfg: RunConfig, items: int) -> None:
    """A one-line ValueError for a batch larger than the `items` of the training split: drawn
    with drop_last, it would leave no batch at all."""
    if cfg.batch_size > items:
        raise ValueError(
            f"batch size {cfg.batch_size} exceeds the {items} training items of "
            f"{cfg.dataset}; give a smaller --batch-size"
        )


class EpochBatches:
    """The training batches of an epoch, drawn afresh from the epoch's seed alone (a resumed
    run sees the same batches); with several processes, this one's slice of each batch. One
    object serves every epoch, so that a loader (and its workers) lasts the whole run."""

    def __init__(self, cfg: RunConfig, loss: BenchLoss, data: DataSplits, ranks: Ranks):
        self.labels = np.asarray(data.train.labels)
        check_batch_fits(cfg, len(self.labels))
        self.batch_size, self.ranks = cfg.batch_size, ranks
        self.m = per_class(cfg, self.labels) if loss.class_balanced else 0
        self.seed = 0
        check_divisible(self.batch_size, ranks)  # the error now, not in epoch 1

    def set_epoch(self, seed: int) -> None:
        self.seed = seed

    def __iter__(self):
        if self.m:  # A new sampler each epoch: MPerClassSampler shuffles its labels in place.
            n = len(self.labels)
            sampler = MPerClassSampler(
                self.labels, self.m, self.batch_size, length_before_new_iter=n
            )
        else:
            gen = torch.Generator().manual_seed(self.seed)
            sampler = RandomSampler(range(len(self.labels)), generator=gen)
        batches = BatchSampler(sampler, self.batch_size, drop_last=True)
        return iter(RankSlices(batches, self.ranks) if self.ranks.world > 1 else batches)

    def __len__(self) -> int:
        return len(self.labels) // self.batch_size


def train_loader(
    cfg: RunConfig,
    loss: BenchLoss,
    data: DataSplits,
    device: torch.device = CPU,
    ranks: Ranks = ONE_PROCESS,
) -> DataLoader:
    """The loader of a run's training batches, for every epoch (see `epoch_loader`)."""
    batches = EpochBatches(cfg, loss, data, ranks)
    return split_loader(data.train, device, cfg.workers, batch_sampler=batches)


def epoch_loader(loader: DataLoader, seed: int) -> DataLoader:
    """The run's loader set to draw the batches of the epoch with this seed."""
    loader.batch_sampler.set_epoch(seed)
    return loader


def load_data(cfg: RunConfig) -> DataSplits:
    """The run's splits, its images normalised as its backbone expects, with the shape its
    network is given (recorded as the run's `input_size`: not the items', where the network
    changes their channels or size)."""
    data = load_run_data(cfg, input_normalization(cfg.backbone))
    if not len(data.test):
        return data
    shape = network_input(cfg.backbone, cfg.pretrained, item_shape(data), cfg.crop)
    return replace(data, network_input="x".join(str(n) for n in shape))


def with_data_identity(configs: list[RunConfig]) -> list[RunConfig]:
    """The configs with their data's location and fingerprint, which are part of a run's
    identity: a run on another folder, or on changed files, is another run."""
    found: dict[tuple[str, str], dict[str, str]] = {}
    for cfg in configs:
        key = (cfg.dataset, cfg.data_root)
        if key not in found:
            found[key] = data_identity(*key)
    return [replace(cfg, **found[(cfg.dataset, cfg.data_root)]) for cfg in configs]
