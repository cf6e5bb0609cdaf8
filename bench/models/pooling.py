"""The backbone's pooling of its last feature map before the embedding (`--pooling`): average,
max, or their sum, as Kim et al. 2020's Proxy-Anchor code pools (GAP + GMP)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bench.models.choices import POOLINGS, backbone_spec


class Pool(nn.Module):
    """Max, or average plus max, pooling to `size` x `size` cells (1: global)."""

    def __init__(self, kind: str, size: int = 1) -> None:
        super().__init__()
        self.kind, self.size = kind, size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        most = F.adaptive_max_pool2d(x, self.size)
        return most if self.kind == "max" else F.adaptive_avg_pool2d(x, self.size) + most

    def extra_repr(self) -> str:
        return f"{self.kind}, size={self.size}"


def pool_layer(kind: str, size: int = 1) -> nn.Module:
    """The pooling `kind` to `size` x `size` cells; avg: torch's AdaptiveAvgPool2d, as the
    backbones pool by default."""
    return nn.AdaptiveAvgPool2d(size) if kind == "avg" else Pool(kind, size)


def check_pooling(backbone: str, embedding: str, pooling: str) -> None:
    """A one-line ValueError for a pooling other than avg where the backbone pools no feature
    map before the embedding (feature vectors; VGG's and AlexNet's FC7)."""
    if pooling not in POOLINGS:
        raise ValueError(f"unknown pooling {pooling!r}; expected one of: {', '.join(POOLINGS)}")
    if pooling == "avg":
        return
    spec = backbone_spec(backbone)
    if spec.vectors:
        raise ValueError(
            f"--pooling {pooling}: {backbone} takes feature vectors, which have no feature map to "
            "pool; use --pooling avg"
        )
    if spec.family == "timm":
        raise ValueError(
            f"--pooling {pooling}: {backbone} pools as timm builds it (a ViT: its class token); "
            "use --pooling avg"
        )
    if spec.cut == "fc7" and embedding != "gap":  # features: FC layers, not a pooled map
        raise ValueError(
            f"--pooling {pooling}: {backbone}'s features are fully connected layers, not a pooled "
            "feature map; use --pooling avg, or a backbone that pools (small_cnn, googlenet, the "
            "ResNets)"
        )
