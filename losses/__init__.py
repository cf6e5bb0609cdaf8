"""The harness's losses, one file each, registered by name."""

from losses import (  # noqa: F401
    angular,
    arcface,
    bce_pair,
    circle,
    contrastive,
    contrastive_centroid,
    contrastive_squared,
    cosface,
    fastap,
    lifted,
    margin,
    margin_class_beta,
    multi_similarity,
    multi_similarity_miner,
    nca,
    nngk,
    normalized_softmax,
    npair,
    ntxent,
    proxy_anchor,
    proxy_nca,
    snr,
    soft_triple,
    softmax,
    subcenter_arcface,
    supcon,
    triplet,
    triplet_nca,
    tuplet_margin,
)
from losses.base import BenchLoss
from losses.registry import (
    LOSSES,
    build_loss,
    get_loss_class,
    is_loss,
    loss_defaults,
    loss_family,
    loss_names,
)

__all__ = [
    "LOSSES",
    "BenchLoss",
    "build_loss",
    "get_loss_class",
    "is_loss",
    "loss_defaults",
    "loss_family",
    "loss_names",
]
