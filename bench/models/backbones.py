"""Backbones by name: which there are, which embeddings each supports, and building one."""

from __future__ import annotations

from torch import nn

from bench.models.bninception import build_bninception, check_bninception

# Re-exported: the names are defined without torch, for the command line's options.
from bench.models.choices import BACKBONES as BACKBONES
from bench.models.choices import EMBEDDINGS, VECTOR_BACKBONES, check_backbone, is_timm
from bench.models.pooling import Pool, check_pooling, pool_layer
from bench.models.pretrained import (
    check_weights,
    keep_resolution,
    load_local_state,
    read_state_dict,
    torchvision_model,
    truncate,
)
from bench.models.small import MLPHead, SmallCNN, VGG16Tiny
from bench.models.timm_backbones import build_timm, check_timm_weights, timm_normalization

BACKBONE_HEAD_DROPOUT = 0.5  # after the ResNets' pooling; the paper does not give the rate

# Smallest input side each backbone runs on (smaller inputs are upsampled by EmbeddingNet).
MIN_SIZES = {
    "small_cnn": 0,
    "small_cnn_gn": 0,
    "googlenet": 64,
    "bninception": 32,  # the least side it takes (bench.models.bninception.takes_size)
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
    "bninception": 1024,
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
    "bninception": 1024,
    "resnet18": 512,
    "resnet50": 2048,
    "vgg16_tiny": 449,
    "resnet18_tiny": 512,
    "resnet50_tiny": 2048,
}

# The Tiny ImageNet report's ResNets: torchvision's model with the resolution-keeping change.
_TINY_RESNETS = {"resnet18_tiny": "resnet18", "resnet50_tiny": "resnet50"}
# Built by torchvision, with its ImageNet weights or a state dict of its model.
TORCHVISION_BACKBONES = ("googlenet", "resnet18", "resnet50", "vgg16", "alexnet", *_TINY_RESNETS)


def check_embedding(backbone: str, embedding: str, dims: int | None = None) -> None:
    """A one-line ValueError unless `backbone` supports `embedding` (with `dims` dims, if given)."""
    if embedding not in EMBEDDINGS:
        raise ValueError(
            f"unknown embedding {embedding!r}; expected one of: {', '.join(EMBEDDINGS)}"
        )
    if embedding == "fc":
        return
    if is_timm(backbone):
        _check_timm_embedding(backbone, embedding)
        return
    if backbone in VECTOR_BACKBONES:
        raise ValueError(f"the {backbone} head takes embedding='fc' only; got {embedding!r}")
    if embedding == "backbone":
        own = FEATURE_DIMS.get(backbone, SmallCNN(1).out_features)
        if dims is not None and dims != own:
            raise ValueError(
                f"the backbone embedding of {backbone} has {own} dims (its own output); got "
                f"dims={dims}: give --dims {own}, or --embedding fc for {dims}"
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
            f"last feature map); got dims={dims}: give --dims {GAP_DIMS[backbone]}, or "
            f"--embedding fc for {dims}"
        )


def _check_timm_embedding(backbone: str, embedding: str) -> None:
    # Its "backbone" embedding's size is the model's num_features, checked where it is built.
    if embedding == "gap":
        raise ValueError(
            f"{backbone}'s own output is its pooled features: use embedding='backbone' (their "
            "size) or 'fc', not 'gap'"
        )


def input_normalization(name: str) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """The mean and standard deviation of a backbone's input images: a timm model's, from its
    pretrained configuration; None for the others, which take ImageNet's (`bench.data.crops`)."""
    return timm_normalization(name) if is_timm(name) else None


def _vgg16_tiny(pretrained: str, embedding: str, pooling: str) -> tuple[nn.Module, int]:
    if pretrained == "imagenet":
        raise ValueError(
            "there are no ImageNet weights for vgg16_tiny; use pretrained='none' or a path to "
            "a state dict of bench's VGG16Tiny"
        )
    model = VGG16Tiny()
    if pretrained != "none":
        load_local_state(model, "vgg16_tiny", pretrained, source="bench's")
    if embedding == "gap":
        return nn.Sequential(model.features, pool_layer(pooling), nn.Flatten()), model.channels
    return model, model.out_features


SMALL_CNNS = ("small_cnn", "small_cnn_gn")
SMALL_CNN_FIRST_CONV = "body.0.0.weight"  # (width, input channels, 3, 3)


def _small_cnn(
    name: str, pretrained: str, in_channels: int, embedding: str, pooling: str = "avg"
) -> tuple[SmallCNN, int]:
    """SmallCNN, from a random init or from a state dict of its backbone (`nngk-bench
    pretrain`); the state dict's first layer fixes the input channels, to which EmbeddingNet
    adapts the images (grey glyphs weights on colour images: their mean)."""
    if pretrained == "imagenet":
        raise ValueError(
            f"there are no ImageNet weights for {name}; use pretrained='none' or a state dict "
            "PATH of its backbone (nngk-bench pretrain writes one)"
        )
    state = None if pretrained == "none" else read_state_dict(name, pretrained)
    if state is not None and SMALL_CNN_FIRST_CONV in state:
        in_channels = state[SMALL_CNN_FIRST_CONV].shape[1]
    grid = 1 if embedding == "gap" else SmallCNN.grid
    norm = "group" if name == "small_cnn_gn" else "batch"
    net = SmallCNN(in_channels=in_channels, grid=grid, norm=norm, pooling=pooling)
    if state is not None:
        load_local_state(net, name, pretrained, source="bench's", state=state)
    return net, in_channels


def input_channels(name: str, pretrained: str, in_channels: int) -> int:
    """The channels a backbone's first layer takes, for images of `in_channels` (EmbeddingNet
    adapts the images to them): a small CNN's, those of its weights file where it has one."""
    if name in VECTOR_BACKBONES:
        return in_channels
    if name in SMALL_CNNS:
        state = None if pretrained in ("none", "imagenet") else read_state_dict(name, pretrained)
        if state is not None and SMALL_CNN_FIRST_CONV in state:
            return int(state[SMALL_CNN_FIRST_CONV].shape[1])
        return in_channels
    return 3


def check_backbone_weights(name: str, pretrained: str, image_size: int | None = None) -> None:
    """A backbone's weights can be had before any data is read, so that an offline machine
    fails before it builds an image cache: a torchvision backbone's (`check_weights`), a small
    CNN's state dict, read, or a timm model's (built, at `image_size`: `check_timm_weights`),
    BN-Inception's (built, and its crop side checked); the other backbones' weights are checked
    as they are built."""
    if name == "bninception":
        check_bninception(pretrained, image_size)
    elif is_timm(name):
        check_timm_weights(name, pretrained, image_size)
    elif name in TORCHVISION_BACKBONES:
        check_weights(_TINY_RESNETS.get(name, name), pretrained)
    elif name in SMALL_CNNS and pretrained != "none":
        _small_cnn(name, pretrained, 1, "fc")


def build_backbone(
    name: str,
    pretrained: str = "none",
    in_channels: int = 3,
    embedding: str = "fc",
    pooling: str = "avg",
    image_size: int | None = None,
) -> tuple[nn.Module, int, int]:
    """Return (feature extractor, feature dimension, expected input channels).

    pretrained: "none" (random init), "imagenet" (torchvision's DEFAULT weights), or a path to
    a state dict of the full torchvision classification model (for vgg16_tiny: of VGG16Tiny; for
    small_cnn and small_cnn_gn: of their SmallCNN, as `nngk-bench pretrain` writes it; for
    bninception: in the layout of its published weights, `bench.models.bninception`); for a
    timm model (`timm:NAME`, `bench.models.timm_backbones`) also "hub", and a safetensors file.
    embedding: "fc" or "backbone" (the features; a linear layer follows for "fc"), or "gap" (the
    global average pool of the last conv feature map, to be used as the embedding itself).
    pooling: how the last feature map is pooled (`bench.models.pooling`).
    image_size: the side of the input crops, which a timm model of one input size is built for.
    """
    check_backbone(name)
    check_embedding(name, embedding)
    check_pooling(name, embedding, pooling)
    if is_timm(name):
        net, feat_dim = build_timm(name, pretrained, image_size)
        return net, feat_dim, 3
    if name in VECTOR_BACKBONES:
        if pretrained != "none":
            raise ValueError(f"{name} has no pretrained weights; got pretrained={pretrained!r}")
        # in_channels: the length of the feature vectors. linear: the embedding is a projection.
        net = MLPHead(in_channels) if name == "mlp" else nn.Flatten()
        return net, getattr(net, "out_features", in_channels), in_channels
    if name in SMALL_CNNS:
        net, in_channels = _small_cnn(name, pretrained, in_channels, embedding, pooling)
        return net, net.out_features, in_channels
    if name == "vgg16_tiny":
        net, feat_dim = _vgg16_tiny(pretrained, embedding, pooling)
        return net, feat_dim, 3
    if name == "bninception":
        net, feat_dim = build_bninception(pretrained, pooling, image_size)
        return net, feat_dim, 3
    base = _TINY_RESNETS.get(name, name)
    model = torchvision_model(base, pretrained)
    if name in _TINY_RESNETS:
        keep_resolution(model)
    if pooling != "avg":  # the ResNets' and GoogLeNet's global average pool
        model.avgpool = Pool(pooling)
    if embedding == "gap" and base == "googlenet":
        # GoogLeNet's dropout sits between its average pool and fc; the GAP embedding is the
        # pooled map itself.
        model.dropout = nn.Identity()
    feat_dim = GAP_DIMS[name] if embedding == "gap" else FEATURE_DIMS[name]
    return truncate(model, base), feat_dim, 3
