"""The embedding network: a backbone, then a linear embedding layer (or the backbone's own
output, or its global average pool)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bench.models.backbones import (
    BACKBONE_HEAD_DROPOUT,
    MIN_SIZES,
    build_backbone,
    check_backbone,
    check_embedding,
)


class EmbeddingNet(nn.Module):
    """Backbone followed by a linear embedding layer; adapts channels and size of the input.

    embedding="gap": the backbone's (globally pooled) features are the embedding; no linear layer.
    """

    def __init__(
        self,
        backbone: nn.Module,
        feat_dim: int,
        dims: int,
        in_channels: int,
        min_size: int = 0,
        embedding: str = "fc",
    ) -> None:
        super().__init__()
        self.backbone = backbone
        self.in_channels = in_channels
        self.min_size = min_size
        if embedding != "fc" and dims != feat_dim:
            raise ValueError(
                f"a {embedding} embedding has the backbone's {feat_dim} dims; got dims={dims}"
            )
        self.embed = nn.Linear(feat_dim, dims) if embedding == "fc" else nn.Identity()

    def _adapt(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[1] == 1 and self.in_channels == 3:
            x = x.repeat(1, 3, 1, 1)
        elif x.shape[1] == 3 and self.in_channels == 1:  # e.g. glyphs weights on colour images
            x = x.mean(dim=1, keepdim=True)
        h, w = x.shape[-2:]
        if min(h, w) < self.min_size:
            scale = self.min_size / min(h, w)
            size = (max(self.min_size, round(h * scale)), max(self.min_size, round(w * scale)))
            x = F.interpolate(x, size=size, mode="bilinear", align_corners=False)
        return x

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Backbone features before the embedding layer."""
        return self.backbone(self._adapt(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.embed(self.features(x))


def build_model(
    backbone: str,
    dims: int,
    pretrained: str = "none",
    in_channels: int = 1,
    embedding: str = "fc",
    pooling: str = "avg",
    image_size: int | None = None,
) -> EmbeddingNet:
    """Build an EmbeddingNet for images with `in_channels` channels and `dims`-d embeddings.

    embedding="gap" takes the embedding straight from global average pooling; `dims` must then
    be the number of channels of the backbone's last feature map (GAP_DIMS). `pooling`: how
    the backbone pools that map (avg, max, avg+max). `image_size`: the side of the input crops
    (a timm model of one input size is built for it).
    """
    check_backbone(backbone)
    check_embedding(backbone, embedding, dims)
    net, feat_dim, expected_channels = build_backbone(
        backbone, pretrained, in_channels, embedding, pooling, image_size
    )
    min_size = MIN_SIZES[backbone] if backbone in MIN_SIZES else net.min_size  # a timm model's
    model = EmbeddingNet(net, feat_dim, dims, expected_channels, min_size, embedding)
    if embedding == "backbone" and backbone.startswith("resnet"):
        model.embed = nn.Dropout(BACKBONE_HEAD_DROPOUT)
    return model
