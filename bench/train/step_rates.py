"""Images per second of the harness's training step and of a bare loop of the same network
and loss (issue 44): what `nngk-bench speed --train-step` compares (bench.speed.train_step)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import torch
from torch.utils.data import DataLoader

from bench.runs.config import RunConfig
from bench.train.compute import Compute
from bench.train.loaders import with_data_identity
from bench.train.optimizers import optimizer_class
from bench.train.precision import Precision
from bench.train.presets import make_configs
from bench.train.trainer import Trainer
from bench.util.runtime import synchronize


class StepRates(NamedTuple):
    """Training images per second of the harness's epoch and of the bare loop, and the seconds
    the harness's epoch waited for its first batch (its loader's workers make a whole batch
    each, so the first comes after one worker's batch; the device idles meanwhile)."""

    harness: float
    bare: float
    first_batch: float
    harness_less_wait: float  # the harness's rate had its epoch not waited for that batch


def step_rates(
    root: Path, backbone: str, batch: int, precision: str, device: torch.device, steps: int,
    resize: int, crop: int, run_dir: Path, workers: int = 0,
) -> StepRates:  # fmt: skip
    """The harness's and the bare loop's training images per second: NNGK on the `folder:`
    data set at `root`, no validation, the harness's second epoch (its batches loaded by
    `workers` processes) against `steps` bare steps."""
    settings = dict(backbone=backbone, pretrained="none", batch_size=batch, epochs=2)
    settings.update(val_fraction=0.0, resize=resize, crop=crop, workers=workers)
    (cfg,) = make_configs(f"folder:{root}", "nngk", (512,), {}, **settings)
    (cfg,) = with_data_identity([replace(cfg, precision=precision)])
    harness, first_batch, less_wait = harness_rate(cfg, device, run_dir)
    return StepRates(harness, bare_rate(cfg, device, steps), first_batch, less_wait)


def harness_rate(cfg: RunConfig, device: torch.device, run_dir: Path) -> tuple[float, float, float]:
    """Training images per second of the harness's second epoch (the first warms it up), the
    seconds it waited for its first batch, and its rate had it not waited."""
    # `speed --device`, checked by the command, as given: nothing is searched here (the harness's
    # epochs validate nothing), so no search device is chosen for it.
    trainer = Trainer(cfg, run_dir, Compute(device, search=None))
    trainer.refresh()
    trainer.train_epoch(0)
    trainer.loader = timed = FirstBatchTimer(trainer.loader)
    synchronize(device)
    start = time.perf_counter()
    images = trainer.train_epoch(1).count * cfg.batch_size
    synchronize(device)
    seconds = time.perf_counter() - start
    return images / seconds, timed.waited, images / (seconds - timed.waited)


class FirstBatchTimer:
    """A training loader as the trainer uses it, noting how long an epoch's first batch took
    to come from the moment the epoch asked for its batches."""

    def __init__(self, loader: DataLoader) -> None:
        self.loader, self.batch_sampler, self.waited = loader, loader.batch_sampler, 0.0

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator:
        start = time.perf_counter()
        batches = iter(self.loader)
        first = next(batches, None)
        self.waited = time.perf_counter() - start
        if first is not None:
            yield first
            yield from batches


def bare_rate(cfg: RunConfig, device: torch.device, steps: int, classes: int = 20) -> float:
    """Training images per second of the same network and loss stepping on one batch."""
    from bench.models.embedding import build_model
    from losses import build_loss

    model = build_model(cfg.backbone, cfg.dims, "none", 3, cfg.embedding, cfg.pooling).to(device)
    bank = 10 * cfg.batch_size
    loss = build_loss("nngk", cfg.loss_params, num_train=bank, num_classes=classes, dims=cfg.dims)
    labels = torch.arange(bank) % classes
    loss.refresh(torch.randn(bank, cfg.dims), labels)
    loss.to(device)
    precision = Precision(cfg.precision, device)
    precision.prepare(model)
    # The run's optimizer and settings (SGD, momentum, weight decay): the recipe's work, not
    # the harness's, so the bare loop does it too.
    optimizer_type, settings = optimizer_class(cfg)
    optimizer = optimizer_type(model.parameters(), **settings)
    x = precision.inputs(torch.randn(cfg.batch_size, 3, cfg.crop, cfg.crop, device=device))
    y, idx = labels[: cfg.batch_size].to(device), torch.arange(cfg.batch_size, device=device)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with precision.autocast():
            emb = model(x)
        precision.step(loss(emb.float(), y, idx), optimizer)

    step()
    synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    synchronize(device)
    return steps * cfg.batch_size / (time.perf_counter() - start)
