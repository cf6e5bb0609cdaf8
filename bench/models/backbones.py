"""Building a backbone from its spec (`bench.models.choices`): a builder for each family of
them, and the checks of an embedding and of weights before any data is read."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from torch import nn

from bench.models.bninception import build_bninception, check_bninception
from bench.models.choices import EMBEDDINGS, SPECS, BackboneSpec, backbone_spec
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
from bench.models.timm_backbones import build_timm, check_timm_weights, timm_input

# embedding="gap": channels of the last conv feature map, which is then also the embedding size.
GAP_DIMS = {name: spec.gap for name, spec in SPECS.items() if spec.gap}


def check_embedding(backbone: str, embedding: str, dims: int | None = None) -> None:
    """A one-line ValueError unless `backbone` supports `embedding` (with `dims` dims, if given)."""
    if embedding not in EMBEDDINGS:
        raise ValueError(
            f"unknown embedding {embedding!r}; expected one of: {', '.join(EMBEDDINGS)}"
        )
    if embedding == "fc":
        return
    spec = backbone_spec(backbone)
    if spec.family == "timm" and embedding == "gap":
        # Its "backbone" embedding's size is the model's num_features, checked where it is built.
        raise ValueError(
            f"{backbone}'s own output is its pooled features: use embedding='backbone' (their "
            "size) or 'fc', not 'gap'"
        )
    if spec.vectors:
        raise ValueError(f"the {backbone} head takes embedding='fc' only; got {embedding!r}")
    if embedding == "gap" and not spec.gap:
        raise ValueError(
            f"{backbone} has no GAP embedding (its embedding is FC7); use embedding='fc', or one "
            f"of: {', '.join(GAP_DIMS)}"
        )
    own = spec.gap if embedding == "gap" else spec.features
    what = "the channels of its last feature map" if embedding == "gap" else "its own output"
    if dims is not None and own is not None and dims != own:
        raise ValueError(
            f"the {embedding.replace('gap', 'GAP')} embedding of {backbone} has {own} dims "
            f"({what}); got dims={dims}: give --dims {own}, or --embedding fc for {dims}"
        )


def input_normalization(name: str) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """The mean and standard deviation of a backbone's input images: a timm model's, from its
    pretrained configuration; None for the others, which take ImageNet's (`bench.data.crops`)."""
    if backbone_spec(name).family != "timm":
        return None
    given = timm_input(name)
    return given.mean, given.std


# What a builder gives: the feature extractor and its features' size. Its arguments, by name:
# `build_backbone`'s, with the backbone's spec for its name.
Built = tuple[nn.Module, int]


def _torchvision(spec: BackboneSpec, pretrained: str, embedding: str, pooling: str, **_) -> Built:
    model = torchvision_model(spec, pretrained)
    if spec.keep_resolution:
        keep_resolution(model)
    if pooling != "avg":  # the ResNets' and GoogLeNet's global average pool
        model.avgpool = Pool(pooling)
    gap = embedding == "gap"
    if gap and spec.gap_drops:  # the GAP embedding is the pooled map itself
        setattr(model, spec.gap_drops, nn.Identity())
    return truncate(model, spec.cut), int((spec.gap if gap else spec.features) or 0)


def _vgg16_tiny(pretrained: str, embedding: str, pooling: str, **_) -> Built:
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


SMALL_CNN_FIRST_CONV = "body.0.0.weight"  # (width, input channels, 3, 3)


def _small_cnn_weights(name: str, pretrained: str, in_channels: int) -> tuple[Mapping | None, int]:
    """A small CNN's weights file, read (None without one), and the channels it takes: its
    first layer's, else `in_channels`."""
    state = None if pretrained in ("none", "imagenet") else read_state_dict(name, pretrained)
    if state is not None and SMALL_CNN_FIRST_CONV in state:
        in_channels = int(state[SMALL_CNN_FIRST_CONV].shape[1])
    return state, in_channels


def _small_cnn(
    spec: BackboneSpec, pretrained: str, in_channels: int, embedding="fc", pooling="avg", **_
) -> Built:
    """SmallCNN, from a random init or from a state dict of its backbone (`nngk-bench
    pretrain`); the state dict's first layer fixes the input channels, to which EmbeddingNet
    adapts the images (grey glyphs weights on colour images: their mean)."""
    if pretrained == "imagenet":
        raise ValueError(
            f"there are no ImageNet weights for {spec.name}; use pretrained='none' or a state "
            "dict PATH of its backbone (nngk-bench pretrain writes one)"
        )
    state, in_channels = _small_cnn_weights(spec.name, pretrained, in_channels)
    grid = 1 if embedding == "gap" else SmallCNN.grid
    norm = "batch" if spec.batch_norm else "group"
    net = SmallCNN(in_channels=in_channels, grid=grid, norm=norm, pooling=pooling)
    if state is not None:
        load_local_state(net, spec.name, pretrained, source="bench's", state=state)
    return net, net.out_features


def _vectors(spec: BackboneSpec, pretrained: str, in_channels: int, **_) -> Built:
    if pretrained != "none":
        raise ValueError(f"{spec.name} has no pretrained weights; got pretrained={pretrained!r}")
    # in_channels: the length of the feature vectors. linear: the embedding is a projection.
    net = MLPHead(in_channels, spec.features) if spec.features else nn.Flatten()
    return net, spec.features or in_channels


BUILDERS: dict[str, Callable[..., Built]] = {
    "torchvision": _torchvision,
    "vgg16_tiny": _vgg16_tiny,
    "small_cnn": _small_cnn,
    "vectors": _vectors,
    "bninception": lambda pretrained, pooling, image_size, **_: build_bninception(
        pretrained, pooling, image_size
    ),
    "timm": lambda spec, pretrained, image_size, **_: build_timm(spec.name, pretrained, image_size),
}
# Where a family's weights can be had before any data is read, so that an offline machine fails
# before it builds an image cache: torchvision's (`check_weights`); a small CNN's state dict,
# read and matched; BN-Inception's (built, and its crop side checked); a timm model's (built at
# the image size where it has weights or a size of its own: `check_timm_weights`). The others'
# are checked as they are built. Arguments: the spec, pretrained, the image size.
WEIGHT_CHECKS: dict[str, Callable[[BackboneSpec, str, int | None], object]] = {
    "torchvision": lambda spec, pretrained, _: check_weights(spec.torchvision, pretrained),
    "small_cnn": lambda spec, pretrained, _: (
        pretrained == "none" or _small_cnn(spec, pretrained, 1)
    ),
    "bninception": lambda _, pretrained, size: check_bninception(pretrained, size),
    "timm": lambda spec, pretrained, size: check_timm_weights(spec.name, pretrained, size),
}


def input_channels(name: str, pretrained: str, in_channels: int) -> int:
    """The channels a backbone's first layer takes, for images of `in_channels` (EmbeddingNet
    adapts the images to them): a small CNN's, those of its weights file where it has one."""
    spec = backbone_spec(name)
    if spec.vectors:
        return in_channels
    return _small_cnn_weights(name, pretrained, in_channels)[1] if spec.family == "small_cnn" else 3


def check_backbone_weights(name: str, pretrained: str, image_size: int | None = None) -> None:
    """A backbone's weights can be had before any data is read (`WEIGHT_CHECKS`)."""
    spec = backbone_spec(name)
    if spec.family in WEIGHT_CHECKS:
        WEIGHT_CHECKS[spec.family](spec, pretrained, image_size)


def build_backbone(
    name: str,
    pretrained: str = "none",
    in_channels: int = 3,
    embedding: str = "fc",
    pooling: str = "avg",
    image_size: int | None = None,
) -> tuple[nn.Module, int, int]:
    """Return (feature extractor, feature dimension, expected input channels), built by the
    builder of the backbone's family from its spec.

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
    spec = backbone_spec(name)
    check_embedding(name, embedding)
    check_pooling(name, embedding, pooling)
    asked = dict(in_channels=in_channels, embedding=embedding, pooling=pooling)
    net, dims = BUILDERS[spec.family](
        spec=spec, pretrained=pretrained, image_size=image_size, **asked
    )
    return net, dims, input_channels(name, pretrained, in_channels)
