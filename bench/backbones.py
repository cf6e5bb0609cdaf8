"""Backbones (feature extractors) and the embedding network built on top of them."""

from __future__ import annotations

import os
from collections.abc import Mapping

import torch
import torch.nn.functional as F
import torchvision
from torch import nn

BACKBONES = ("small_cnn", "googlenet", "resnet18", "resnet50", "vgg16", "alexnet")

# Smallest input side each backbone runs on (smaller inputs are upsampled by EmbeddingNet).
MIN_SIZES = {
    "small_cnn": 0,
    "googlenet": 64,
    "resnet18": 32,
    "resnet50": 32,
    "vgg16": 32,
    "alexnet": 64,
}

FEATURE_DIMS = {
    "googlenet": 1024,
    "resnet18": 512,
    "resnet50": 2048,
    "vgg16": 4096,
    "alexnet": 4096,
}

_PRETRAINED_HINT = "expected 'imagenet', 'none', or a path to a state dict"


def _conv_bn_relu(in_channels: int, out_channels: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1, bias=False),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(inplace=True),
    )


class SmallCNN(nn.Module):
    """Three conv-BN-ReLU blocks for small images (e.g. 1x8x8 digits, 3x32x32).

    The last maps are pooled to a 4x4 grid, not to one value per channel: where a stroke lies
    is what tells small digits apart, and a global pool discards it.
    """

    grid = 4

    def __init__(self, in_channels: int = 1, width: int = 32) -> None:
        super().__init__()
        self.out_features = width * 2 * self.grid**2
        self.body = nn.Sequential(
            _conv_bn_relu(in_channels, width),
            _conv_bn_relu(width, width * 2),
            nn.MaxPool2d(2),
            _conv_bn_relu(width * 2, width * 2),
            nn.AdaptiveAvgPool2d(self.grid),
            nn.Flatten(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())


def check_backbone(name: str) -> None:
    if name not in BACKBONES:
        raise ValueError(f"unknown backbone {name!r}; expected one of: {', '.join(BACKBONES)}")


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


def _load_local(model: nn.Module, name: str, path: str) -> None:
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
            f"state dict {path!r} does not match torchvision's {name}: {'; '.join(problems)}"
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


def build_backbone(
    name: str, pretrained: str = "none", in_channels: int = 3
) -> tuple[nn.Module, int, int]:
    """Return (feature extractor, feature dimension, expected input channels).

    pretrained: "none" (random init), "imagenet" (torchvision's DEFAULT weights), or a path to
    a state dict of the full torchvision classification model.
    """
    check_backbone(name)
    if name == "small_cnn":
        if pretrained != "none":
            raise ValueError(f"small_cnn has no pretrained weights; got pretrained={pretrained!r}")
        net = SmallCNN(in_channels=in_channels)
        return net, net.out_features, in_channels
    if pretrained == "imagenet":
        model = _load_imagenet(name)
    else:
        model = torchvision.models.get_model(name, weights=None, **_model_kwargs(name, pretrained))
        if pretrained != "none":
            _load_local(model, name, pretrained)
    return _truncate(model, name), FEATURE_DIMS[name], 3


class EmbeddingNet(nn.Module):
    """Backbone followed by a linear embedding layer; adapts channels and size of the input."""

    def __init__(
        self, backbone: nn.Module, feat_dim: int, dims: int, in_channels: int, min_size: int = 0
    ) -> None:
        super().__init__()
        self.backbone = backbone
        self.in_channels = in_channels
        self.min_size = min_size
        self.embed = nn.Linear(feat_dim, dims)

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
    backbone: str, dims: int, pretrained: str = "none", in_channels: int = 1
) -> EmbeddingNet:
    """Build an EmbeddingNet for images with `in_channels` channels and `dims`-d embeddings."""
    net, feat_dim, expected_channels = build_backbone(backbone, pretrained, in_channels)
    return EmbeddingNet(net, feat_dim, dims, expected_channels, MIN_SIZES[backbone])
