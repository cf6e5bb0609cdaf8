"""Images per second of the harness's training step and of a bare loop of the same network
and loss (issue 44): what `nngk-bench speed --train-step` compares (bench.speed.train_step)."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import torch

from bench.runs.config import RunConfig
from bench.train.loaders import with_data_identity
from bench.train.optimizers import optimizer_class
from bench.train.precision import Precision
from bench.train.presets import make_configs
from bench.train.trainer import Trainer
from bench.util.runtime import synchronize


def step_rates(
    root: Path, backbone: str, batch: int, precision: str, device: torch.device, steps: int,
    resize: int, crop: int, run_dir: Path, workers: int = 0,
) -> tuple[float, float]:  # fmt: skip
    """(the harness's, the bare loop's) training images per second: NNGK on the `folder:`
    data set at `root`, no validation, the harness's second epoch (its batches loaded by
    `workers` processes) against `steps` bare steps."""
    settings = dict(backbone=backbone, pretrained="none", batch_size=batch, epochs=2)
    settings.update(val_fraction=0.0, resize=resize, crop=crop, workers=workers)
    (cfg,) = make_configs(f"folder:{root}", "nngk", (512,), {}, **settings)
    (cfg,) = with_data_identity([replace(cfg, precision=precision)])
    return harness_rate(cfg, device, run_dir), bare_rate(cfg, device, steps)


def harness_rate(cfg: RunConfig, device: torch.device, run_dir: Path) -> float:
    """Training images per second of the harness's second epoch (the first warms it up)."""
    trainer = Trainer(cfg, run_dir, device)
    trainer.refresh()
    trainer.train_epoch(0)
    synchronize(device)
    start = time.perf_counter()
    steps = trainer.train_epoch(1).count
    synchronize(device)
    return steps * cfg.batch_size / (time.perf_counter() - start)


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
