"""The backbones by name, each declared once (`BackboneSpec`: every fact the harness asks of it,
as timm keeps a pretrained configuration per model), and what the command line offers in its
options and help; without torch (`bench.models.backbones` builds them). Any timm model is a
backbone too, `timm:NAME`: its input size and normalisation come from timm's pretrained
configuration where it is built (`bench.models.timm_backbones`)."""

from __future__ import annotations

from dataclasses import dataclass

TIMM_PREFIX = "timm:"
# fc: a linear layer of `dims` outputs after the backbone; gap: the global average pool of the last
# feature map; backbone: the backbone's own output (VGG/AlexNet FC7 with dropout and without ReLU,
# the ResNets' final pooling followed by dropout), as Meyer et al. 2018 §3.2 classifies.
EMBEDDINGS = ("fc", "gap", "backbone")
# The backbone's pooling before the embedding (`--pooling`; bench.models.pooling builds them).
POOLINGS = ("avg", "max", "avg+max")


@dataclass(frozen=True)
class BackboneSpec:
    """One backbone: how it is built (`family`, a builder of `bench.models.backbones`) and what
    the harness asks of it. None: known once the network is built (a timm model's)."""

    name: str
    family: str  # torchvision, small_cnn, vgg16_tiny, bninception, vectors (mlp, linear), timm
    features: int | None  # its own output's size (the "backbone" embedding); None: its input's
    gap: int | None = None  # channels of its last feature map (the GAP embedding); None: no GAP
    min_size: int | None = 0  # the least input side; EmbeddingNet upsamples smaller inputs
    batch_norm: bool | None = True  # what --freeze-bn freezes (small CNNs: else GroupNorm)
    head_dropout: float = 0.0  # on its own output as the "backbone" embedding
    pretrain: bool = False  # `nngk-bench pretrain` trains it on glyphs (at 28 px, on a CPU)
    torchvision: str = ""  # torchvision's model, built with its ImageNet weights or a file's
    cut: str = "fc"  # the classifier replaced by the identity; fc7: VGG's FC7 (no pooled map)
    keep_resolution: bool = False  # conv1 at stride 1 and no first max-pool (64-px inputs)
    options: tuple[tuple[str, bool], ...] = ()  # torchvision's arguments without its weights
    file_options: tuple[tuple[str, bool], ...] = ()  # and more where a local file is loaded
    ignored: tuple[str, ...] = ()  # key prefixes of a weights file that are not loaded
    gap_drops: str = ""  # a layer between the pool and the classifier, gone for a GAP embedding
    sized_by_crop: bool = False  # built for the run's --crop, even a built-in set's images

    @property
    def vectors(self) -> bool:
        """A head for feature vectors (`features:PATH.npz`), not images."""
        return self.family == "vectors"


SPECS: dict[str, BackboneSpec] = {}


def register_backbone(spec: BackboneSpec) -> BackboneSpec:
    """`spec` under its name; a ValueError for a name taken (timm's registry refuses so too):
    a second spec would otherwise replace the first without a word."""
    if spec.name in SPECS or spec.name.startswith(TIMM_PREFIX):
        raise ValueError(f"backbone {spec.name!r} is already registered; give it another name")
    SPECS[spec.name] = spec
    return spec


# GoogLeNet without its auxiliary classifiers (nor their weights), so that forward returns a
# plain tensor in train mode too; init_weights=False skips its slow truncated-normal init. Its
# ImageNet weights expect transform_input=True (torchvision's default with them), and a local
# file is most likely that same file. Its dropout lies between its pool and fc.
GOOGLENET = dict(
    family="torchvision",
    torchvision="googlenet",
    options=(("aux_logits", False), ("init_weights", False)),
    file_options=(("transform_input", True),),
    ignored=("aux1.", "aux2."),
    gap_drops="dropout",
)
# The ResNets' dropout after their pooling (Meyer et al. 2018, who give no rate).
RESNET = dict(family="torchvision", min_size=32, head_dropout=0.5)
# The Tiny ImageNet report's ResNets: torchvision's, keeping the resolution of 64-px inputs.
TINY = dict(RESNET, min_size=8, keep_resolution=True)
# VGG's and AlexNet's embedding is FC7, as in the papers that use them: no GAP embedding.
FC7 = dict(family="torchvision", batch_norm=False, cut="fc7")

for _spec in (
    BackboneSpec("small_cnn", "small_cnn", 1024, gap=64, pretrain=True),
    BackboneSpec("small_cnn_gn", "small_cnn", 1024, gap=64, batch_norm=False, pretrain=True),
    BackboneSpec("googlenet", features=1024, gap=1024, min_size=64, **GOOGLENET),
    # min_size: the least side it takes (bench.models.bninception.takes_size)
    BackboneSpec("bninception", "bninception", 1024, gap=1024, min_size=32, sized_by_crop=True),
    BackboneSpec(
        "resnet18", features=512, gap=512, torchvision="resnet18", pretrain=True, **RESNET
    ),
    BackboneSpec("resnet50", features=2048, gap=2048, torchvision="resnet50", **RESNET),
    BackboneSpec("vgg16", features=4096, min_size=32, torchvision="vgg16", **FC7),
    BackboneSpec("alexnet", features=4096, min_size=64, torchvision="alexnet", **FC7),
    # The Tiny ImageNet report's VGG-16, reduced for 64-px inputs (bench.models.small).
    BackboneSpec(
        "vgg16_tiny", "vgg16_tiny", 2048, gap=449, min_size=32, batch_norm=False, cut="fc7"
    ),
    BackboneSpec("resnet18_tiny", features=512, gap=512, torchvision="resnet18", **TINY),
    BackboneSpec("resnet50_tiny", features=2048, gap=2048, torchvision="resnet50", **TINY),
    # Heads for feature vectors (cached CNN features, `features:PATH.npz`) instead of images:
    # mlp's hidden layer of 512; linear's embedding is a projection of the vectors themselves.
    BackboneSpec("mlp", "vectors", 512),
    BackboneSpec("linear", "vectors", None, batch_norm=False),
):
    register_backbone(_spec)

# Derived, for the command line's options and the checks before a run.
BACKBONES = tuple(SPECS)
VECTOR_BACKBONES = tuple(n for n, s in SPECS.items() if s.vectors)
PRETRAIN_BACKBONES = tuple(n for n, s in SPECS.items() if s.pretrain)


def is_timm(name: str) -> bool:
    return name.startswith(TIMM_PREFIX)


def sized_by_crop(name: str) -> bool:
    """Whether the backbone is built for the run's --crop, whatever its data (a timm model,
    BN-Inception): a built-in set's images are taken to that size too. False for a name that
    is no backbone (a baseline's 'none')."""
    spec = SPECS.get(name) or (
        backbone_spec(name) if is_timm(name) and name != TIMM_PREFIX else None
    )
    return bool(spec and spec.sized_by_crop)


def backbone_spec(name: str) -> BackboneSpec:
    """The spec of a registered backbone, or of `timm:NAME` what is known before timm is
    imported; a one-line ValueError for a name that is neither (timm checks NAME where the
    model is built: `bench.models.timm_backbones`)."""
    if is_timm(name) and name[len(TIMM_PREFIX) :]:
        # Its size and input from its pretrained configuration, its batch norm once built.
        return BackboneSpec(name, "timm", None, min_size=None, batch_norm=None, sized_by_crop=True)
    if is_timm(name):
        raise ValueError(
            f"--backbone {name!r} names no timm model; give timm:NAME, e.g. "
            "timm:vit_small_patch16_224 (timm.list_models() lists them)"
        )
    if name not in SPECS:
        raise ValueError(
            f"unknown backbone {name!r}; expected one of: {', '.join(SPECS)}, or "
            "timm:NAME (any timm model)"
        )
    return SPECS[name]


def check_backbone(name: str) -> None:
    """A one-line ValueError for a backbone neither registered nor `timm:NAME`."""
    backbone_spec(name)
