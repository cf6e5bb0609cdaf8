"""Building a backbone from its spec (`bench.models.choices`): a builder for each family of
them, and the checks of an embedding and of weights before any data is read."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

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
    own, what = (
        (spec.gap, "the channels of its last feature map")
        if embedding == "gap"
        else (spec.features, "its own output")
    )
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


# What a builder gives: the feature extractor, its features' size, the input channels it takes.
Built = tuple[nn.Module, int, int]


@dataclass(frozen=True)
class Asked:
    """What a builder is asked for: `build_backbone`'s arguments, the backbone's spec for its
    name."""

    spec: BackboneSpec
    pretrained: str
    in_channels: int = 3
    embedding: str = "fc"
    pooling: str = "avg"
    image_size: int | None = None


def _torchvision(asked: Asked) -> Built:
    spec = asked.spec
    model = torchvision_model(spec, asked.pretrained)
    if spec.keep_resolution:
        keep_resolution(model)
    if asked.pooling != "avg":  # the ResNets' and GoogLeNet's global average pool
        model.avgpool = Pool(asked.pooling)
    gap = asked.embedding == "gap"
    if gap and spec.gap_drops:  # the GAP embedding is the pooled map itself
        setattr(model, spec.gap_drops, nn.Identity())
    return truncate(model, spec.cut), int((spec.gap if gap else spec.features) or 0), 3


def _vgg16_tiny(asked: Asked) -> Built:
    if asked.pretrained == "imagenet":
        raise ValueError(
            "there are no ImageNet weights for vgg16_tiny; use pretrained='none' or a path to "
            "a state dict of bench's VGG16Tiny"
        )
    model = VGG16Tiny()
    if asked.pretrained != "none":
        load_local_state(model, "vgg16_tiny", asked.pretrained, source="bench's")
    if asked.embedding == "gap":
        pooled = nn.Sequential(model.features, pool_layer(asked.pooling), nn.Flatten())
        return pooled, model.channels, 3
    return model, model.out_features, 3


SMALL_CNN_FIRST_CONV = "body.0.0.weight"  # (width, input channels, 3, 3)


def _small_cnn_weights(name: str, pretrained: str, in_channels: int) -> tuple[Mapping | None, int]:
    """A small CNN's weights file, read (None without one), and the channels it takes: its
    first layer's, else `in_channels`."""
    state = None if pretrained in ("none", "imagenet") else read_state_dict(name, pretrained)
    if state is not None and SMALL_CNN_FIRST_CONV in state:
        in_channels = int(state[SMALL_CNN_FIRST_CONV].shape[1])
    return state, in_channels


def _small_cnn(asked: Asked) -> Built:
    """SmallCNN, from a random init or from a state dict of its backbone (`nngk-bench
    pretrain`); the state dict's first layer fixes the input channels, to which EmbeddingNet
    adapts the images (grey glyphs weights on colour images: their mean)."""
    name, pretrained = asked.spec.name, asked.pretrained
    if pretrained == "imagenet":
        raise ValueError(
            f"there are no ImageNet weights for {name}; use pretrained='none' or a state dict "
            "PATH of its backbone (nngk-bench pretrain writes one)"
        )
    state, in_channels = _small_cnn_weights(name, pretrained, asked.in_channels)
    grid = 1 if asked.embedding == "gap" else SmallCNN.grid
    norm = "batch" if asked.spec.batch_norm else "group"
    net = SmallCNN(in_channels=in_channels, grid=grid, norm=norm, pooling=asked.pooling)
    if state is not None:
        load_local_state(net, name, pretrained, source="bench's", state=state)
    return net, net.out_features, in_channels


def _vectors(asked: Asked) -> Built:
    spec, channels = asked.spec, asked.in_channels  # the length of the feature vectors
    if asked.pretrained != "none":
        raise ValueError(
            f"{spec.name} has no pretrained weights; got pretrained={asked.pretrained!r}"
        )
    # linear: the embedding is a projection of the vectors themselves.
    net = MLPHead(channels, spec.features) if spec.features else nn.Flatten()
    return net, spec.features or channels, channels


BUILDERS: dict[str, Callable[[Asked], Built]] = {
    "torchvision": _torchvision,
    "vgg16_tiny": _vgg16_tiny,
    "small_cnn": _small_cnn,
    "vectors": _vectors,
    "bninception": lambda a: (*build_bninception(a.pretrained, a.pooling, a.image_size), 3),
    "timm": lambda a: (*build_timm(a.spec.name, a.pretrained, a.image_size), 3),
}
# Where a family's weights can be had before any data is read, so that an offline machine fails
# before it builds an image cache: torchvision's (`check_weights`); a small CNN's state dict,
# read and matched; BN-Inception's (built, and its crop side checked); a timm model's (built at
# the image size where it has weights or a size of its own: `check_timm_weights`). The others'
# are checked as they are built.
WEIGHT_CHECKS: dict[str, Callable[[Asked], object]] = {
    "torchvision": lambda a: check_weights(a.spec.torchvision, a.pretrained),
    "small_cnn": lambda a: a.pretrained == "none" or _small_cnn(replace(a, in_channels=1)),
    "bninception": lambda a: check_bninception(a.pretrained, a.image_size),
    "timm": lambda a: check_timm_weights(a.spec.name, a.pretrained, a.image_size),
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
        WEIGHT_CHECKS[spec.family](Asked(spec, pretrained, image_size=image_size))


def build_backbone(
    name: str,
    pretrained: str = "none",
    in_channels: int = 3,
    embedding: str = "fc",
    pooling: str = "avg",
    image_size: int | None = None,
) -> Built:
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
    asked = Asked(spec, pretrained, in_channels, embedding, pooling, image_size)
    return BUILDERS[spec.family](asked)
