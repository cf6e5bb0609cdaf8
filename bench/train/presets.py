"""Run configuration as a plain dataclass, and the protocol presets as plain data."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from bench.data.identity import canonical_dataset
from bench.data.names import FEATURES_PREFIX, is_emoji, is_glyphs
from bench.models.backbones import GAP_DIMS
from bench.protocols import DEFAULT_PROTOCOL, get_protocol
from bench.runs.config import RunConfig, canonical_preset
from bench.train.option_checks import check_crop, check_given
from bench.train.preset_base import (
    LARGE_RETRIEVAL,
    SMALL_NETWORK_NNGK,
    Preset,
    paper_nngk,
    sigma_for_dims,
)
from bench.train.recipe_presets import BY_DATASET, INSHOP, SMALL_SETS
from bench.util.progress import log
from losses import get_loss_class, is_loss

# A paper preset's learning rate (1e-5, Meyer et al. 2018) fine-tunes an ImageNet network; the same
# network trained from scratch (--pretrained none) barely moves at it. Such a run takes 3e-4
# unless --lr is given, chosen here on a folder of 28-px glyphs (20 classes x 20, small CNN,
# NNGK, 30 epochs): the training loss fell 6.5 % at 1e-5, 40 % at 3e-4, and at 1e-3 it fell 60 %
# by epoch 22 and then grew 400-fold as the embedding outran its centres (weight decay 5e-4
# did not stop it). Unless given, its batch norm trains (the statistics a preset freezes are an
# ImageNet network's; a random init's mean nothing) and no warm-up epoch holds the backbone still
# (it keeps a pretrained network from the new layers' first gradients).
FROM_SCRATCH = {"lr": 3e-4, "freeze_bn": False, "warmup_epochs": 0}


# digits (8x8, 5 training classes, ~720 training images): a small CNN trains an epoch in about a
# second on 2 CPU cores. Training on five classes and testing on five others, the embedding
# soon specialises to the training classes and generalises worse (see README): so a small
# learning rate and few epochs, and a large embedding next to the papers' 64. NNGK's centres are
# refreshed every epoch because training is only ~100 steps long; sigma = 1 suits the scale of
# a freshly initialised linear layer.
DIGITS = Preset(
    dims=(64, 512),
    config=dict(
        backbone="small_cnn", epochs=10, batch_size=64, m_per_class=16, lr=0.001, weight_decay=5e-4
    ),
    loss_params={"nngk": SMALL_NETWORK_NNGK},
)

# glyphs (28x28, 100 training classes of 30 instances, bench/data/glyphs.py): the digits
# preset's small CNN, 10 epochs, batches of 16 classes x 4 instances. The learning rate was
# chosen per loss from {0.01, 0.001}, the same two trials for every loss, by validation MAP@R
# (64 dims, seed 0; docs/protocols.md, "glyphs"): 0.01 for most, 0.001 for NNGK (at 0.01 its
# embedding grows until every kernel vanishes), N-pair, and of today's losses (issue 24, chosen
# the same way) the classification losses, circle, ProxyAnchor and SoftTriple (validation MAP@R
# at 0.01 / 0.001: arcface 6.2 / 15.3, cosface 8.4 / 17.9, soft-triple 5.0 / 27.1); and of
# issue 46's, chosen the same way, tuplet-margin 27.2 / 32.3, pnp 31.4 / 34.3, instance
# 4.1 / 26.1, large-margin-softmax 1.0 / 7.2, sphereface 7.1 / 7.5 (the others at 0.01).
LOWER_LR = (
    "nngk npair arcface cosface subcenter-arcface normalized-softmax circle proxy-anchor "
    "soft-triple tuplet-margin pnp instance large-margin-softmax sphereface"
).split()
GLYPHS = Preset(
    dims=(64, 512),
    config=dict(
        backbone="small_cnn", epochs=10, batch_size=64, m_per_class=4, lr=0.01, weight_decay=5e-4
    ),
    loss_params={"nngk": SMALL_NETWORK_NNGK},
    loss_config={name: {"lr": 0.001} for name in LOWER_LR},
)

# emoji (bench/data/emoji.py; 32x32 RGB by default, 518 training classes of 8-12 images): the
# glyphs preset, its per-loss learning rates included (chosen on glyphs, not tuned on emoji;
# `nngk-bench tune` gives every loss the same budget there), validated on a fifth of the training
# classes held out (Musgrave et al. 2020), as a class has too few images to lend a share of each.
EMOJI = replace(GLYPHS, config={**GLYPHS.config, "val_split": "classes"})

# Meyer et al. 2018 §3.1: GoogLeNet with ImageNet weights, 256x256 images, random 224 crops and
# mirroring, batch 20, SGD lr 1e-5, weight decay 2e-4; NNGK with 100 neighbours refreshed every 10
# epochs. The paper does not give the number of epochs.
METRIC = Preset(
    dims=(64,),
    config=dict(
        backbone="googlenet",
        pretrained="imagenet",
        epochs=30,
        batch_size=20,
        m_per_class=4,
        lr=1e-5,
        weight_decay=2e-4,
        resize=256,
        crop=224,
    ),
    loss_params={"nngk": paper_nngk(sigma_for_dims)},
)

# Meyer et al. 2018 §3.2: the same training settings; VGG16 with FC7 (4096) itself as the embedding;
# ResNets: their final pooling, then dropout (--embedding backbone); sigma about 100 for
# VGG16's 4096-dimensional embedding on Birds200; validation CUB 20 %, Cars196 30 % of the
# training images, Leafsnap field 50/20/30 (20 % of all is 2/7 of the 70 % left after test).
CLASSIFY = replace(
    METRIC,
    dims=(4096,),
    config={**METRIC.config, "backbone": "vgg16", "embedding": "backbone", "val_fraction": 0.2},
    loss_params={"nngk": paper_nngk(100.0)},
)
CLASSIFY_VAL = {"cub": 0.2, "cars196": 0.3, "leafsnap": 2 / 7, "flowers102": 0.0}

# The Tiny ImageNet pair-verification report: Tiny ImageNet at 64x64 without augmentation, the
# report's reduced VGG-16, embedding length 96, batch 64, lr 1e-3; validation 50 of each seen
# class's 500 training images.
PAIRS = Preset(
    dims=(96,),
    config=dict(
        backbone="vgg16_tiny",
        epochs=20,
        batch_size=64,
        m_per_class=4,
        lr=1e-3,
        weight_decay=0.0,
        resize=64,
        crop=64,
        val_fraction=0.1,
    ),
    loss_params={"nngk": SMALL_NETWORK_NNGK},  # the report's network is trained from scratch
)


# Stanford Online Products under the metric protocol, with its published split: the settings of
# Musgrave et al. 2020 ("A Metric Learning Reality Check", its code powerful-benchmarker, branch
# metric-learning: its default configs, config_models, config_general, config_optimizers and
# config_transforms) as far as a run expresses them: ImageNet BN-Inception (its published weights,
# fetched once or given as --pretrained PATH: docs/protocols.md) with a 128-d linear embedding (one
# of its four models), its batch-norm statistics frozen (freeze_trunk_batchnorm), batches of 32 = 8
# classes x 4, RMSprop lr 1e-6, weight decay 1e-4, momentum 0.9, random-resized 227 crops of 16-100
# % of the area of the image resized to 256, mirrored, the centre 227 crop to evaluate; validation
# on held-out training classes, a quarter of them as each of its four class folds holds (here the
# last quarter). A run cannot express: four models trained on the four folds and their 512-d
# concatenation tested, early stopping on validation (here the best of 30 epochs is tested; their
# epoch is 100 iterations), batch norm's scale and shift still trained (their frozen batch norm is
# the layers' eval mode alone; --freeze-bn holds them too).
REALITY_CHECK_SOP = Preset(
    dims=(128,),
    config=dict(
        LARGE_RETRIEVAL,
        backbone="bninception",
        freeze_bn=True,
        epochs=30,
        batch_size=32,
        optimizer="rmsprop",
        lr=1e-6,
        weight_decay=1e-4,
        momentum=0.9,
        crop=227,
        crop_scale="0.16,1",
        val_fraction=0.25,
    ),
    loss_params={"nngk": paper_nngk(sigma_for_dims)},
)

# iNaturalist 2018 under the metric protocol, with Brown et al. 2020's split: their Smooth-AP
# code's settings (Andrew-Brown1/Smooth_AP, src/main.py and its iNaturalist command, issue 17:
# `--bs 384`): ImageNet ResNet-50, a 512-d embedding, batches of 384 of 4 images a class, Adam
# lr 1e-5, weight decay 4e-4, 90 epochs, random-resized 224 crops and mirroring, resize 256 and
# the centre 224 crop to evaluate. A run cannot express: the embedding layer at 2x the lr, the
# lr cut by 0.3 after epochs 40 and 70. They score every epoch on the test split; here
# validation holds out a fifth of the training classes instead (Musgrave et al. 2020).
INATURALIST = Preset(
    dims=(512,),
    config=dict(
        LARGE_RETRIEVAL,
        backbone="resnet50",
        epochs=90,
        batch_size=384,
        optimizer="adam",
        lr=1e-5,
        weight_decay=4e-4,
    ),
    loss_params={"nngk": paper_nngk(sigma_for_dims)},
)

# Cached feature vectors (`features:PATH.npz`, e.g. VGG16 FC7): any loss trains a small head
# (one hidden layer, then the embedding layer) in minutes on a CPU; the digits preset's
# optimiser, and NNGK's bank refreshed every epoch as the head is cheap to run.
FEATURES = Preset(
    dims=(64,),
    config=dict(backbone="mlp", epochs=20, batch_size=64, m_per_class=16, lr=0.01),
    loss_params=DIGITS.loss_params,
)

# Liu et al. 2019 §2: ImageNet ResNet18, a 64-d embedding, batch 128, images resized to 256x256,
# random crops from the image padded by 10 pixels a side, horizontal flips; SGD. The paper gives no
# learning rate, weight decay or epochs: SGD lr 1e-3 for fine-tuning a pretrained ResNet at batch
# 128, Meyer et al. 2018's weight decay, 30 epochs. Its losses are triplet-nca (with the all,
# semihard and easy-positive miners) and npair; `--embedding gap` takes the 512-d GAP layer.
LIU2019 = Preset(
    dims=(64,),
    config=dict(
        backbone="resnet18",
        pretrained="imagenet",
        epochs=30,
        batch_size=128,
        m_per_class=4,
        lr=1e-3,
        weight_decay=2e-4,
        resize=256,
        crop=256,
        pad=10,
    ),
)
# On the built-in sets (digits, glyphs): their own preset with Liu et al. 2019's embedding size and
# batch; the one-pixel shift of the digits' training images is their padded random crop.
# small_cnn's GAP layer has 64 dims, so FC and GAP embeddings compare at the same size.
LIU2019_SMALL_SETS = ((64,), {"batch_size": 128})


def on_small_sets(dims: tuple[int, ...], settings: dict[str, Any]) -> dict[str, Preset]:
    """The built-in sets' own presets (digits, glyphs) with a named preset's embedding sizes and
    the settings it gives them (`LIU2019_SMALL_SETS`, `bench.train.recipe_presets.SMALL_SETS`)."""
    return {
        dataset: replace(preset, dims=dims, config={**preset.config, **settings})
        for dataset, preset in (("digits", DIGITS), ("glyphs", GLYPHS))
    }


# The named presets (`--preset`): a paper's settings in place of the protocol's preset; the
# field's recipes (Kim et al. 2020's Proxy-Anchor recipe, the ViT track) from
# bench.train.recipe_presets.
PRESETS = {
    "liu2019": (LIU2019, on_small_sets(*LIU2019_SMALL_SETS)),
    **{
        name: (images, {**by_dataset, **on_small_sets(*SMALL_SETS[name])})
        for name, (images, by_dataset) in BY_DATASET.items()
    },
}
# The protocols' presets on image data sets, by the name a protocol declares (Protocol.preset),
# with the data sets that differ (classify: their validation share).
PROTOCOL_PRESETS = {
    "metric": (METRIC, {"sop": REALITY_CHECK_SOP, "inaturalist": INATURALIST}),
    "classify": (
        CLASSIFY,
        {
            name: replace(CLASSIFY, config={**CLASSIFY.config, "val_fraction": val})
            for name, val in CLASSIFY_VAL.items()
        },
    ),
    "pairs": (PAIRS, {}),
    "query-gallery": (INSHOP, {}),
}


def preset_for(protocol: str, dataset: str, preset: str = "") -> Preset:
    """The preset of a protocol for a data set (digits has its own under every protocol), or
    a named paper's preset (`PRESETS`) in place of the protocol's."""
    if preset:
        preset = canonical_preset(preset)
        if preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}; expected one of: {', '.join(PRESETS)}")
        images, small = PRESETS[preset]
        return small.get("glyphs" if is_glyphs(dataset) or is_emoji(dataset) else dataset, images)
    if dataset == "digits":
        return DIGITS
    if is_glyphs(dataset):
        return GLYPHS
    if is_emoji(dataset):  # validation by held-out classes where the protocol allows it
        return EMOJI if get_protocol(protocol).class_validation else GLYPHS
    if dataset.startswith(FEATURES_PREFIX):
        return FEATURES
    images, by_dataset = PROTOCOL_PRESETS[get_protocol(protocol).preset]
    return by_dataset.get(dataset, images)


def batch_settings(loss: str) -> dict[str, Any]:
    """The batch a loss declares it needs, as run settings (N-pair: m_per_class=2)."""
    if not is_loss(loss):  # the baselines
        return {}
    cls = get_loss_class(loss)
    per_class = cls.examples_per_class
    return {"m_per_class": per_class} if cls.class_balanced and per_class else {}


def make_configs(
    dataset: str,
    loss: str,
    dims: tuple[int, ...] | None,
    loss_params: dict[str, Any],
    protocol: str = DEFAULT_PROTOCOL,
    preset: str = "",
    **overrides: Any,
) -> list[RunConfig]:
    """One config per embedding size: preset values, then the user's overrides on top
    (`preset_configs`); a named preset that sets nothing else than its sizes for this data set
    and these options is said and left out of the configs, so that it names no table of its
    own (its runs are the data set's own: presets are not in the run id). A built-in set is
    named as one name (`canonical_dataset`), however it was spelt."""
    dataset = canonical_dataset(dataset)
    configs = preset_configs(dataset, loss, dims, loss_params, protocol, preset, **overrides)
    if not preset:
        return configs
    sizes = tuple(c.dims for c in configs)
    plain = preset_configs(dataset, loss, sizes, loss_params, protocol, "", **overrides)
    if [replace(c, preset="") for c in configs] != plain:
        return configs
    log.warning(
        f"--preset {preset} sets nothing on {dataset} that its own preset does not, at these "
        f"sizes and options: the runs are {dataset}'s own, in its table"
    )
    return plain


def preset_configs(
    dataset: str,
    loss: str,
    dims: tuple[int, ...] | None,
    loss_params: dict[str, Any],
    protocol: str = DEFAULT_PROTOCOL,
    preset: str = "",
    **overrides: Any,
) -> list[RunConfig]:
    """One config per embedding size: preset values, then the user's overrides on top.

    A preset's loss parameter may be a function of the embedding size and the config (NNGK's
    paper sigma, which applies to the paper's network only). A GAP
    embedding without explicit sizes takes the size of the backbone's GAP layer."""
    preset = canonical_preset(preset)
    chosen = preset_for(protocol, dataset, preset)
    settings = {**chosen.config, **batch_settings(loss), **chosen.loss_config.get(loss, {})}
    base = RunConfig(dataset=dataset, protocol=protocol, loss=loss, preset=preset, **settings)
    given = {k: v for k, v in overrides.items() if v is not None}
    base = replace(base, **given)
    check_crop(base, given)
    check_given(base, given)
    if base.pretrained == "none" and chosen.config.get("pretrained", "none") != "none":
        base = replace(base, **{k: v for k, v in FROM_SCRATCH.items() if k not in given})
    if not dims and base.embedding == "gap":
        dims = (GAP_DIMS.get(base.backbone, chosen.dims[0]),)
    configs = []
    for d in dims or chosen.dims:
        params = {
            k: v(d, base) if callable(v) else v for k, v in chosen.loss_params.get(loss, {}).items()
        }
        configs.append(replace(base, dims=d, loss_params={**params, **loss_params}))
    return configs
