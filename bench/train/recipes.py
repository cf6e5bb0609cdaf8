"""The field's training recipes as run settings (issue 45), applied by the trainer in a line
each: batch norm frozen (`--freeze-bn`), warm-up epochs that train the embedding layer and the
loss's parameters alone (`--warmup-epochs`), and a learning-rate schedule stepped once an epoch
(`--schedule`), as Kim et al. 2020's Proxy-Anchor code trains; the checks of these settings and
of the other recipe options (`--pooling`, `--embedding-lr`, `--crop-scale`) before a run."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.optim.lr_scheduler import CosineAnnealingLR, LRScheduler, MultiStepLR

from bench.data.crop_area import parse_crop_scale
from bench.models.choices import SPECS, backbone_spec
from bench.models.pooling import check_pooling
from bench.runs.config import RunConfig
from bench.train.choices import parse_schedule


def batch_norms(module: nn.Module) -> list[_BatchNorm]:
    """The batch-norm layers of `module` (any dimension; SyncBatchNorm too)."""
    return [m for m in module.modules() if isinstance(m, _BatchNorm)]


def make_scheduler(
    schedule: str, optimizer: torch.optim.Optimizer, epochs: int
) -> LRScheduler | None:
    """torch's scheduler of `--schedule`, stepped once an epoch; None for none."""
    kind, milestones, factor = parse_schedule(schedule)
    if kind == "cosine":
        return CosineAnnealingLR(optimizer, T_max=epochs)
    if kind == "step":
        return MultiStepLR(optimizer, milestones=list(milestones), gamma=factor)
    return None


class Recipe:
    """A run's recipe on its network: made before the optimizer (frozen batch norm's scale and
    shift are not optimised), its schedule given the optimizer (`schedule`), then
    `start_epoch` after the trainer's `model.train()` and `end_epoch` after each epoch."""

    def __init__(self, cfg: RunConfig, model: nn.Module) -> None:
        self.cfg, self.model = cfg, model
        check_freeze_bn(cfg, model.backbone)
        if cfg.freeze_bn:
            for layer in batch_norms(model.backbone):
                layer.requires_grad_(False)
        # What the warm-up holds still: the backbone's parameters that train after it.
        self.backbone = [p for p in model.backbone.parameters() if p.requires_grad]
        self.backbone_trains = True
        self.scheduler: LRScheduler | None = None

    def schedule(self, optimizer: torch.optim.Optimizer) -> None:
        self.scheduler = make_scheduler(self.cfg.schedule, optimizer, self.cfg.epochs)

    def start_epoch(self, epoch: int) -> bool:
        """Frozen batch norm back in eval mode; the backbone held still in a warm-up epoch.
        True where what trains changed, so that a DistributedDataParallel wrapper, which
        reduces the gradients of what trained when it was made, is made again."""
        if self.cfg.freeze_bn:
            for layer in batch_norms(self.model.backbone):
                layer.eval()
        trains = epoch >= self.cfg.warmup_epochs
        changed = trains != self.backbone_trains
        for parameter in self.backbone:
            parameter.requires_grad_(trains)
        self.backbone_trains = trains
        return changed

    def end_epoch(self) -> None:
        """The next epoch's learning rate, before the epoch's checkpoint saves it."""
        if self.scheduler is not None:
            self.scheduler.step()


def check_recipe(cfg: RunConfig) -> None:
    """A one-line ValueError for recipe settings that cannot apply to the run."""
    check_pooling(cfg.backbone, cfg.embedding, cfg.pooling)
    parse_schedule(cfg.schedule)
    parse_crop_scale(cfg.crop_scale)
    if cfg.crop_scale and cfg.crop_mode != "aspect":
        raise ValueError(
            f"--crop-scale {cfg.crop_scale} is the random-resized crop's area, and --crop-mode "
            f"{cfg.crop_mode} crops a fixed size; give --crop-mode aspect"
        )
    check_freeze_bn(cfg)
    check_embedding_layer(cfg)


def check_freeze_bn(cfg: RunConfig, backbone: nn.Module | None = None) -> None:
    """--freeze-bn on a backbone with batch norm, as its spec declares (before a run); where
    only the built network tells (a timm model's, a ViT's without), as `backbone` has."""
    if not cfg.freeze_bn:
        return
    has = backbone_spec(cfg.backbone).batch_norm
    if has is None and backbone is not None:
        has = bool(batch_norms(backbone))
    if has is False:
        with_them = ", ".join(name for name, spec in SPECS.items() if spec.batch_norm)
        raise ValueError(
            f"--freeze-bn: {cfg.backbone} has no batch-norm layers to freeze; drop --freeze-bn "
            f"(a preset's: give --no-freeze-bn) or use a backbone with them ({with_them})"
        )


def check_embedding_layer(cfg: RunConfig) -> None:
    """Warm-up epochs fewer than the run's, and they and --embedding-lr on an embedding layer."""
    if not 0 <= cfg.warmup_epochs < cfg.epochs:
        raise ValueError(
            f"a warm-up of {cfg.warmup_epochs} epochs (--warmup-epochs, or the preset's) leaves "
            f"no epoch of the {cfg.epochs} to train the backbone; give --warmup-epochs 0 or "
            "more, fewer than --epochs, or more --epochs"
        )
    if not cfg.embedding_lr > 0:
        raise ValueError(f"--embedding-lr {cfg.embedding_lr:g}: give a positive multiple")
    given = [f"--warmup-epochs {cfg.warmup_epochs}"] if cfg.warmup_epochs else []
    given += [f"--embedding-lr {cfg.embedding_lr:g}"] if cfg.embedding_lr != 1 else []
    if given and cfg.embedding != "fc":
        raise ValueError(
            f"{given[0]} acts on the embedding layer, and a {cfg.embedding} embedding has none; "
            "use --embedding fc"
        )
