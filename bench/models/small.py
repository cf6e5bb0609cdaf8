"""The harness's own small networks: SmallCNN for small images, MLPHead for feature vectors,
and the Tiny ImageNet report's reduced VGG-16."""

from __future__ import annotations

import torch
from torch import nn

from bench.models.pooling import pool_layer

# small_cnn_gn's GroupNorm: 8 channels a group (Wu and He 2018 find 8-32 per group alike).
GROUP_SIZE = 8


def _conv_norm_relu(in_channels: int, out_channels: int, norm: str = "batch") -> nn.Sequential:
    if norm == "batch":
        layer = nn.BatchNorm2d(out_channels)
    else:
        layer = nn.GroupNorm(out_channels // GROUP_SIZE, out_channels)
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1, bias=False),
        layer,
        nn.ReLU(inplace=True),
    )


class SmallCNN(nn.Module):
    """Three conv-norm-ReLU blocks for small images (e.g. 1x8x8 digits, 3x32x32).

    The last maps are pooled to a 4x4 grid, not to one value per channel: where a stroke lies
    is what tells small digits apart, and a global pool discards it. grid=1 is that global
    average pool (the GAP embedding: 2 * width features); `pooling` max or avg+max pools each
    cell so instead (`--pooling`).

    norm="batch" (small_cnn) or "group" (small_cnn_gn). BatchNorm's running statistics are
    estimated on the training classes and then normalise unseen classes too; GroupNorm
    normalises each image by itself, so the network before training and after it embed alike
    in train and eval mode, and nothing about the training classes is carried in statistics.
    """

    grid = 4

    def __init__(
        self,
        in_channels: int = 1,
        width: int = 32,
        grid: int = 4,
        norm: str = "batch",
        pooling: str = "avg",
    ) -> None:
        super().__init__()
        self.grid = grid
        self.out_features = width * 2 * grid**2
        self.body = nn.Sequential(
            _conv_norm_relu(in_channels, width, norm),
            _conv_norm_relu(width, width * 2, norm),
            nn.MaxPool2d(2),
            _conv_norm_relu(width * 2, width * 2, norm),
            pool_layer(pooling, self.grid),
            nn.Flatten(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class MLPHead(nn.Module):
    """A small head for feature vectors: one hidden layer (Linear, BatchNorm, ReLU), so that any
    loss of the harness trains on cached features in minutes on a CPU; EmbeddingNet's linear
    layer follows."""

    def __init__(self, in_features: int, hidden: int = 512) -> None:
        super().__init__()
        self.out_features = hidden
        self.body = nn.Sequential(
            nn.Linear(in_features, hidden), nn.BatchNorm1d(hidden), nn.ReLU(inplace=True)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x.flatten(1))


class VGG16Tiny(nn.Module):
    """VGG-16 reduced for 64x64 Tiny ImageNet images: "model #1" of the report's Table 1.

    VGG-16's five conv blocks (2, 2, 3, 3, 3 conv3x3 + ReLU; no BatchNorm, the report adds none)
    with depths 32, 79, 173, 422, 449, and VGG's max-pool after blocks 1-4 only: the report drops
    the last one, so a 64x64 input ends at 4x4x449. Then two fully connected layers of 2048 with
    ReLU; the report does not mention dropout, so they keep VGG's dropout 0.5. The embedding layer
    (96 dims in the report) comes after, in EmbeddingNet.
    """

    blocks = (2, 2, 3, 3, 3)

    def __init__(
        self,
        depths: tuple[int, ...] = (32, 79, 173, 422, 449),
        fc: tuple[int, int] = (2048, 2048),
        in_channels: int = 3,
    ) -> None:
        super().__init__()
        self.channels = depths[-1]
        self.out_features = fc[1]
        self.features = _vgg_blocks(self.blocks, depths, in_channels)
        # The identity at 64x64 (maps already 4x4); at 32x32 the maps are 2x2 and this repeats
        # each value 2x2, so the flattened size is 4 * 4 * depth for any input of 16 or more.
        self.avgpool = nn.AdaptiveAvgPool2d((4, 4))
        self.classifier = nn.Sequential(
            nn.Linear(self.channels * 16, fc[0]),
            nn.ReLU(inplace=True),
            nn.Dropout(0.5),
            nn.Linear(fc[0], fc[1]),
            nn.ReLU(inplace=True),
            nn.Dropout(0.5),
        )
        _init_vgg(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def _vgg_blocks(
    blocks: tuple[int, ...], depths: tuple[int, ...], in_channels: int
) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (convs, depth) in enumerate(zip(blocks, depths, strict=True)):
        for _ in range(convs):
            layers += [nn.Conv2d(in_channels, depth, 3, padding=1), nn.ReLU(inplace=True)]
            in_channels = depth
        if i < len(blocks) - 1:
            layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
    return nn.Sequential(*layers)


def _init_vgg(model: nn.Module) -> None:
    # torchvision's VGG init: without BatchNorm, PyTorch's default init shrinks the signal over
    # 13 conv layers.
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0, 0.01)
            nn.init.zeros_(m.bias)
