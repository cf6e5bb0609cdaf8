"""The embedding network: a backbone, then a linear embedding layer (or the backbone's own
output, or its global average pool)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bench.models.backbones import build_backbone, check_embedding, input_channels
from bench.models.choices import backbone_spec
from bench.models.small import SmallCNN
from bench.models.timm_backbones import timm_input


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
            size = upscaled_size(h, w, self.min_size)
            x = F.interpolate(x, size=size, mode="bilinear", align_corners=False)
        return x

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Backbone features before the embedding layer."""
        return self.backbone(self._adapt(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.embed(self.features(x))


def upscaled_size(h: int, w: int, min_size: int) -> tuple[int, int]:
    """(height, width) of an input whose shorter side is under `min_size`, scaled up to it
    (what EmbeddingNet gives a backbone); as it is where it is not."""
    if min(h, w) >= min_size:
        return h, w
    scale = min_size / min(h, w)
    return max(min_size, round(h * scale)), max(min_size, round(w * scale))


def network_input(
    backbone: str, pretrained: str, shape: tuple[int, ...], image_size: int | None = None
) -> tuple[int, ...]:
    """The shape the backbone's own layers are given for an item of `shape` (channels, height,
    width), as EmbeddingNet and a timm model of one input size adapt it: its channels, a side
    under its least scaled up, a timm ViT's resize to the side it was built for (`image_size`,
    else its own). A feature vector as it is."""
    spec = backbone_spec(backbone)
    if len(shape) != 3 or spec.vectors:
        return tuple(shape)
    channels = input_channels(backbone, pretrained, shape[0])
    if spec.min_size is not None:
        return channels, *upscaled_size(shape[1], shape[2], spec.min_size)
    timm = timm_input(backbone)  # a timm model's input, from its pretrained configuration
    if timm.fixed:  # TimmBackbone resizes every input to the side it was built for
        side = image_size or timm.size
        return channels, side, side
    return channels, *upscaled_size(shape[1], shape[2], timm.min_size)


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
    be the number of channels of the backbone's last feature map (its spec's `gap`). `pooling`:
    how the backbone pools that map (avg, max, avg+max). `image_size`: the side of the input
    crops (a timm model of one input size is built for it).
    """
    spec = backbone_spec(backbone)
    check_embedding(backbone, embedding, dims)
    if embedding == "backbone" and spec.family != "timm":
        # The random draws of two small CNNs that the checks of this embedding's size built
        # before issue 67 (for a default argument): made still, so that its runs keep their bits.
        SmallCNN(1), SmallCNN(1)
    net, feat_dim, expected_channels = build_backbone(
        backbone, pretrained, in_channels, embedding, pooling, image_size
    )
    min_size = net.min_size if spec.min_size is None else spec.min_size  # a timm model's: built
    model = EmbeddingNet(net, feat_dim, dims, expected_channels, min_size, embedding)
    if embedding == "backbone" and spec.head_dropout:
        model.embed = nn.Dropout(spec.head_dropout)
    return model
