"""The harness's losses, one file each, registered by name."""

from losses import (  # noqa: F401
    bce_pair,
    contrastive,
    contrastive_centroid,
    contrastive_squared,
    lifted,
    nca,
    nngk,
    npair,
    softmax,
    triplet,
    triplet_nca,
)
from losses.base import BenchLoss
from losses.registry import LOSSES, build_loss, get_loss_class, loss_defaults, loss_names

__all__ = ["LOSSES", "BenchLoss", "build_loss", "get_loss_class", "loss_defaults", "loss_names"]
