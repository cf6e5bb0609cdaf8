"""The backbones and embeddings by name, without torch: what the command line offers in its
options and help (`bench.models.backbones` builds them)."""

from __future__ import annotations

BACKBONES = (
    "small_cnn",
    "small_cnn_gn",
    "googlenet",
    "bninception",
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
# Any timm model, `timm:NAME` (with its pretrained tag, if any: timm:vit_small_patch16_224.dino),
# built by bench.models.timm_backbones where timm is installed.
TIMM_PREFIX = "timm:"
# Heads for feature vectors (cached CNN features, `features:PATH.npz`) instead of images.
VECTOR_BACKBONES = ("mlp", "linear")
# What `nngk-bench pretrain` trains on glyphs: the small CNNs, and the torchvision backbone a CPU
# trains at glyphs' size (28 px, taken to its 32-px least).
PRETRAIN_BACKBONES = ("small_cnn", "small_cnn_gn", "resnet18")

# fc: a linear layer of `dims` outputs after the backbone; gap: the global average pool of the last
# feature map; backbone: the backbone's own output (VGG/AlexNet FC7 with dropout and without ReLU,
# the ResNets' final pooling followed by dropout), as Meyer et al. 2018 §3.2 classifies.
EMBEDDINGS = ("fc", "gap", "backbone")
# The backbone's pooling before the embedding (`--pooling`; bench.models.pooling builds them).
POOLINGS = ("avg", "max", "avg+max")
# Backbones without batch norm, which `--freeze-bn` has nothing to freeze in (tested against
# the built networks).
WITHOUT_BATCH_NORM = ("small_cnn_gn", "vgg16", "alexnet", "vgg16_tiny", "linear")
# Backbones whose features are fully connected layers after a fixed-size pool (VGG's and
# AlexNet's FC7, vgg16_tiny's), not a pooled feature map: only their GAP embedding pools.
FC_FEATURE_BACKBONES = ("vgg16", "alexnet", "vgg16_tiny")


def is_timm(name: str) -> bool:
    return name.startswith(TIMM_PREFIX)


def sized_by_crop(name: str) -> bool:
    """Whether the backbone is built for the run's --crop, whatever its data (a timm model,
    BN-Inception): a built-in set's images are taken to that size too."""
    return is_timm(name) or name == "bninception"


def check_backbone(name: str) -> None:
    """A one-line ValueError for a backbone that is neither one of BACKBONES nor `timm:NAME`
    (whose NAME timm checks where the model is built: `bench.models.timm_backbones`)."""
    if is_timm(name) and name[len(TIMM_PREFIX) :]:
        return
    if is_timm(name):
        raise ValueError(
            f"--backbone {name!r} names no timm model; give timm:NAME, e.g. "
            "timm:vit_small_patch16_224 (timm.list_models() lists them)"
        )
    if name not in BACKBONES:
        raise ValueError(
            f"unknown backbone {name!r}; expected one of: {', '.join(BACKBONES)}, or "
            "timm:NAME (any timm model)"
        )
