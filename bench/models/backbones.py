"""Backbones (feature extractors) and the embedding network built on top of them."""

from __future__ import annotations

import os
from collections.abc import Mapping

import torch
import torch.nn.functional as F
import torchvision
from torch import nn

BACKBONES = (
    "small_cnn",
    "small_cnn_gn",
    "googlenet",
    "resnet18",
    "resnet50",
    "vgg16",
    "alexnet",
    "vgg16_tiny",
    "resnet18_tiny",
    "resnet50_tiny",
    "mlp",
    "linear",
)
# Heads for feature vectors (cached CNN features, `features:PATH.npz`) instead of images.
VECTOR_BACKBONES = ("mlp", "linear")

# fc: a linear layer of `dims` outputs after the backbone; gap: the global average pool of the
# last feature map; backbone: the backbone's own output (VGG/AlexNet FC7 with dropout and
# without ReLU, the ResNets' final pooling followed by dropout), as seed 000 §3.2 classifies.
EMBEDDINGS = ("fc", "gap", "backbone")
BACKBONE_HEAD_DROPOUT = 0.5  # after the ResNets' pooling; the paper does not give the rate

# Smallest input side each backbone runs on (smaller inputs are upsampled by EmbeddingNet).
MIN_SIZES = {
    "small_cnn": 0,
    "small_cnn_gn": 0,
    "googlenet": 64,
    "resnet18": 32,
    "resnet50": 32,
    "vgg16": 32,
    "alexnet": 64,
    "vgg16_tiny": 32,
    "resnet18_tiny": 8,
    "resnet50_tiny": 8,
    "mlp": 0,
    "linear": 0,
}

FEATURE_DIMS = {
    "googlenet": 1024,
    "resnet18": 512,
    "resnet50": 2048,
    "vgg16": 4096,
    "alexnet": 4096,
    "vgg16_tiny": 2048,
    "resnet18_tiny": 512,
    "resnet50_tiny": 2048,
}

# embedding="gap": channels of the last conv feature map, which is then also the embedding size.
# vgg16 and alexnet have none: their embedding is FC7, as in the papers that use them.
GAP_DIMS = {
    "small_cnn": 64,
    "small_cnn_gn": 64,
    "googlenet": 1024,
    "resnet18": 512,
    "resnet50": 2048,
    "vgg16_tiny": 449,
    "resnet18_tiny": 512,
    "resnet50_tiny": 2048,
}

# The Tiny ImageNet report's ResNets: torchvision's model with the resolution-keeping change.
_TINY_RESNETS = {"resnet18_tiny": "resnet18", "resnet50_tiny": "resnet50"}

_PRETRAINED_HINT = "expected 'imagenet', 'none', or a path to a state dict"
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
    average pool (the GAP embedding: 2 * width features).

    norm="batch" (small_cnn) or "group" (small_cnn_gn). BatchNorm's running statistics are
    estimated on the training classes and then normalise unseen classes too; GroupNorm
    normalises each image by itself, so the network before training and after it embed alike
    in train and eval mode, and nothing about the training classes is carried in statistics.
    """

    grid = 4

    def __init__(
        self, in_channels: int = 1, width: int = 32, grid: int = 4, norm: str = "batch"
    ) -> None:
        super().__init__()
        self.grid = grid
        self.out_features = width * 2 * grid**2
        self.body = nn.Sequential(
            _conv_norm_relu(in_channels, width, norm),
            _conv_norm_relu(width, width * 2, norm),
            nn.MaxPool2d(2),
            _conv_norm_relu(width * 2, width * 2, norm),
            nn.AdaptiveAvgPool2d(self.grid),
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


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())


def check_backbone(name: str) -> None:
    if name not in BACKBONES:
        raise ValueError(f"unknown backbone {name!r}; expected one of: {', '.join(BACKBONES)}")


def check_embedding(backbone: str, embedding: str, dims: int | None = None) -> None:
    """A one-line ValueError unless `backbone` supports `embedding` (with `dims` dims, if given)."""
    if embedding not in EMBEDDINGS:
        raise ValueError(
            f"unknown embedding {embedding!r}; expected one of: {', '.join(EMBEDDINGS)}"
        )
    if embedding == "fc":
        return
    if backbone in VECTOR_BACKBONES:
        raise ValueError(f"the {backbone} head takes embedding='fc' only; got {embedding!r}")
    if embedding == "backbone":
        own = FEATURE_DIMS.get(backbone, SmallCNN(1).out_features)
        if dims is not None and dims != own:
            raise ValueError(
                f"the backbone embedding of {backbone} has {own} dims (its own output); got "
                f"dims={dims}"
            )
        return
    if backbone not in GAP_DIMS:
        raise ValueError(
            f"{backbone} has no GAP embedding (its embedding is FC7); use embedding='fc', or one "
            f"of: {', '.join(GAP_DIMS)}"
        )
    if dims is not None and dims != GAP_DIMS[backbone]:
        raise ValueError(
            f"the GAP embedding of {backbone} has {GAP_DIMS[backbone]} dims (the channels of its "
            f"last feature map); got dims={dims}"
        )


def _model_kwargs(name: str, pretrained: str) -> dict[str, bool]:
    if name != "googlenet":
        return {}
    if pretrained == "none":
        # init_weights=False skips GoogLeNet's slow truncated-normal init; no aux heads so that
        # forward returns a plain tensor in train mode too.
        return {"aux_logits": False, "init_weights": False}
    # Pretrained GoogLeNet weights expect transform_input=True (torchvision's default with weights);
    # a local state dict is most likely that same file, so use the same setting for it.
    return {"aux_logits": False, "init_weights": False, "transform_input": True}


def _load_imagenet(name: str) -> nn.Module:
    weights = torchvision.models.get_model_weights(name).DEFAULT
    try:
        # No extra kwargs: torchvision then picks the settings these weights expect (for GoogLeNet
        # transform_input=True, and its aux heads, which it drops after loading).
        return torchvision.models.get_model(name, weights=weights)
    except (OSError, RuntimeError) as err:
        hub_dir = os.path.join(torch.hub.get_dir(), "checkpoints")
        raise RuntimeError(
            f"could not fetch ImageNet weights {weights} for {name} ({_one_line(err)}); "
            f"pass --pretrained PATH with a local state dict, or put the weights file "
            f"into {hub_dir}"
        ) from err


def _read_state_dict(name: str, path: str) -> Mapping[str, torch.Tensor]:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"pretrained={path!r} is not a file; {_PRETRAINED_HINT}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # unpickling raises many different types
        raise ValueError(
            f"could not load a state dict for {name} from {path!r}: {_one_line(err)}"
        ) from err
    if not isinstance(state, Mapping) or not all(
        isinstance(v, torch.Tensor) for v in state.values()
    ):
        raise ValueError(f"{path!r} does not hold a state dict (a mapping of tensors) for {name}")
    if name == "googlenet":
        # We build GoogLeNet without auxiliary classifiers; their weights are not needed.
        state = {k: v for k, v in state.items() if not k.startswith(("aux1.", "aux2."))}
    return state


def _load_local(model: nn.Module, name: str, path: str, source: str = "torchvision's") -> None:
    state = _read_state_dict(name, path)
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    shapes = sorted(k for k in set(state) & set(expected) if state[k].shape != expected[k].shape)
    problems = [
        f"{len(keys)} {what} (e.g. {keys[0]})"
        for what, keys in (
            ("missing keys", missing),
            ("unexpected keys", unexpected),
            ("shape mismatches", shapes),
        )
        if keys
    ]
    if problems:
        raise ValueError(
            f"state dict {path!r} does not match {source} {name}: {'; '.join(problems)}"
        )
    model.load_state_dict(state)


def _truncate(model: nn.Module, name: str) -> nn.Module:
    if name in ("googlenet", "resnet18", "resnet50"):
        model.fc = nn.Identity()
        return model
    # vgg16 classifier:   [Linear, ReLU, Dropout, Linear(FC7), ReLU, Dropout, Linear]
    # alexnet classifier: [Dropout, Linear, ReLU, Dropout, Linear(FC7), ReLU, Linear]
    # The embedding is FC7 with dropout but without the ReLU after it (as in the NNGK paper).
    linears = [i for i, m in enumerate(model.classifier) if isinstance(m, nn.Linear)]
    fc7 = linears[1]
    return nn.Sequential(
        model.features,
        model.avgpool,
        nn.Flatten(),
        *list(model.classifier.children())[: fc7 + 1],
    )


def _torchvision_model(name: str, pretrained: str) -> nn.Module:
    if pretrained == "imagenet":
        return _load_imagenet(name)
    model = torchvision.models.get_model(name, weights=None, **_model_kwargs(name, pretrained))
    if pretrained != "none":
        _load_local(model, name, pretrained)
    return model


def _keep_resolution(model: nn.Module) -> None:
    # The report's ResNets for 64x64 inputs: conv1 at stride 1 and no first max-pool. conv1 keeps
    # its 7x7 kernel and padding 3, so loaded (e.g. ImageNet) weights still apply.
    model.conv1.stride = (1, 1)
    model.maxpool = nn.Identity()


def _vgg16_tiny(pretrained: str, embedding: str) -> tuple[nn.Module, int]:
    if pretrained == "imagenet":
        raise ValueError(
            "there are no ImageNet weights for vgg16_tiny; use pretrained='none' or a path to "
            "a state dict of bench's VGG16Tiny"
        )
    model = VGG16Tiny()
    if pretrained != "none":
        _load_local(model, "vgg16_tiny", pretrained, source="bench's")
    if embedding == "gap":
        return nn.Sequential(model.features, nn.AdaptiveAvgPool2d(1), nn.Flatten()), model.channels
    return model, model.out_features


def build_backbone(
    name: str, pretrained: str = "none", in_channels: int = 3, embedding: str = "fc"
) -> tuple[nn.Module, int, int]:
    """Return (feature extractor, feature dimension, expected input channels).

    pretrained: "none" (random init), "imagenet" (torchvision's DEFAULT weights), or a path to
    a state dict of the full torchvision classification model (for vgg16_tiny: of VGG16Tiny).
    embedding: "fc" or "backbone" (the features; a linear layer follows for "fc"), or "gap" (the
    global average pool of the last conv feature map, to be used as the embedding itself).
    """
    check_backbone(name)
    check_embedding(name, embedding)
    if name in VECTOR_BACKBONES:
        if pretrained != "none":
            raise ValueError(f"{name} has no pretrained weights; got pretrained={pretrained!r}")
        # in_channels: the length of the feature vectors. linear: the embedding is a projection.
        net = MLPHead(in_channels) if name == "mlp" else nn.Flatten()
        return net, getattr(net, "out_features", in_channels), in_channels
    if name in ("small_cnn", "small_cnn_gn"):
        if pretrained != "none":
            raise ValueError(f"{name} has no pretrained weights; got pretrained={pretrained!r}")
        grid = 1 if embedding == "gap" else SmallCNN.grid
        norm = "group" if name == "small_cnn_gn" else "batch"
        net = SmallCNN(in_channels=in_channels, grid=grid, norm=norm)
        return net, net.out_features, in_channels
    if name == "vgg16_tiny":
        net, feat_dim = _vgg16_tiny(pretrained, embedding)
        return net, feat_dim, 3
    base = _TINY_RESNETS.get(name, name)
    model = _torchvision_model(base, pretrained)
    if name in _TINY_RESNETS:
        _keep_resolution(model)
    if embedding == "gap" and base == "googlenet":
        # GoogLeNet's dropout sits between its average pool and fc; the GAP embedding is the
        # pooled map itself.
        model.dropout = nn.Identity()
    feat_dim = GAP_DIMS[name] if embedding == "gap" else FEATURE_DIMS[name]
    return _truncate(model, base), feat_dim, 3


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
    backbone: str, dims: int, pretrained: str = "none", in_channels: int = 1, embedding: str = "fc"
) -> EmbeddingNet:
    """Build an EmbeddingNet for images with `in_channels` channels and `dims`-d embeddings.

    embedding="gap" takes the embedding straight from global average pooling; `dims` must then
    be the number of channels of the backbone's last feature map (GAP_DIMS).
    """
    check_backbone(backbone)
    check_embedding(backbone, embedding, dims)
    net, feat_dim, expected_channels = build_backbone(backbone, pretrained, in_channels, embedding)
    model = EmbeddingNet(net, feat_dim, dims, expected_channels, MIN_SIZES[backbone], embedding)
    if embedding == "backbone" and backbone.startswith("resnet"):
        model.embed = nn.Dropout(BACKBONE_HEAD_DROPOUT)
    return model
