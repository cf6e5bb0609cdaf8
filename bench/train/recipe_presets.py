"""The field's recipes of today as presets (issue 45): Kim et al. 2020's Proxy-Anchor recipe
(the `proxy-anchor` preset, and In-Shop's under the query-gallery protocol) and the ViT track
(the `vit` preset), each value with its source. `bench.train.presets` offers them by name
(`--preset`); what a small built-in set takes of them is here too (`SMALL_SETS`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from bench.train.preset_base import LARGE_RETRIEVAL, Preset, paper_nngk, sigma_for_dims

# Kim et al. 2020's CUB-200-2011 recipe, as their Proxy-Anchor code trains it
# (tjddus9597/Proxy-Anchor-CVPR2020: its README's CUB command for Inception-BN, `--batch-size 180
# --lr 1e-4 --warm 1 --bn-freeze 1 --lr-decay-step 10`, and train.py's defaults): ImageNet
# BN-Inception (Ioffe and Szegedy 2015; its published weights, fetched once or given as --pretrained
# PATH: docs/protocols.md), a 512-d linear embedding over the sum of global average and global max
# pooling (their bn_inception and ResNet models pool so), batch norm frozen (statistics, scale and
# shift), batches of 180, AdamW lr 1e-4 and weight decay 1e-4 (train.py's defaults), 60 epochs
# (train.py's), the first training the embedding layer and the proxies alone (`--warm 1`), the lr
# halved every 10 epochs (StepLR, lr_decay_step 10, lr_decay_gamma 0.5: after epochs 10, 20, 30, 40
# and 50), random-resized 224 crops (torchvision's 8-100 % of the area) and mirroring, resize 256
# and the centre 224 crop to evaluate (dataset/utils.py). ProxyAnchor's proxies train at 100x the
# lr, as in their code: the loss declares it (`nngk-bench losses`). Their other network is ImageNet
# ResNet-50 (--backbone resnet50), whose README command differs: --batch-size 120 --warmup-epochs 5
# and a cut every 5 epochs on CUB (--schedule step:5,10,15,20,25,30,35,40,45,50,55:0.5), every 10 on
# Cars196. Class-balanced losses take 4 images a class (their batches are drawn at random). They
# choose the epoch on the test's R@1; here validation holds out a fifth of the training images. A
# run cannot express: gradients clipped at 10 a value (the network's and the proxies'), the
# embedding layer's Kaiming initialisation.
PROXY_ANCHOR = Preset(
    dims=(512,),
    config=dict(
        backbone="bninception",
        pretrained="imagenet",
        epochs=60,
        batch_size=180,
        m_per_class=4,
        optimizer="adamw",
        lr=1e-4,
        weight_decay=1e-4,
        pooling="avg+max",
        freeze_bn=True,
        warmup_epochs=1,
        schedule="step:10,20,30,40,50:0.5",
        resize=256,
        crop=224,
        crop_mode="aspect",
    ),
    loss_params={"nngk": paper_nngk(sigma_for_dims)},
)
# Cars196: their README's Cars command differs in its cuts alone (`--lr-decay-step 20`).
PROXY_ANCHOR_CARS = replace(
    PROXY_ANCHOR, config={**PROXY_ANCHOR.config, "schedule": "step:20,40:0.5"}
)

# In-Shop under the query-gallery protocol (and Stanford Online Products under --preset
# proxy-anchor: their README's SOP command is the same): Kim et al. 2020's In-Shop command
# (`--batch-size 180 --lr 6e-4 --warm 1 --bn-freeze 0 --lr-decay-step 20 --lr-decay-gamma 0.25`)
# and train.py's defaults: ImageNet BN-Inception, a 512-d embedding over global average + max
# pooling, batch norm training (`--bn-freeze 0`), batches of 180, AdamW lr 6e-4, weight decay
# 1e-4, 60 epochs, the first training the embedding layer and the proxies alone, the lr cut by
# 0.25 every 20 epochs (after epochs 20 and 40), random-resized 224 crops and mirroring, resize
# 256 and the centre 224 crop to evaluate; class-balanced losses 4 images an item. They choose
# the epoch on the test's R@1; here validation holds out a fifth of the training items. A run
# cannot express: gradients clipped at 10 a value, the embedding layer's Kaiming initialisation.
# So: the CUB recipe with what their In-Shop command changes, validated as the large retrieval
# sets are (`LARGE_RETRIEVAL`: on held-out training classes).
INSHOP = replace(
    PROXY_ANCHOR,
    config={
        **PROXY_ANCHOR.config,
        **LARGE_RETRIEVAL,
        "freeze_bn": False,
        "lr": 6e-4,
        "schedule": "step:20,40:0.25",
    },
)

# The ViT track on CUB-200-2011: Ermolov et al. 2022's code (htdt/hyp_metric, "Hyperbolic Vision
# Transformers": train.py and its README's CUB command for DINO ViT-S/16, `--model dino_vits16
# --num_samples 9 --lr 1e-5 --ep 50 --resize 256`): ViT-S/16 with the DINO weights (Caron et al.
# 2021; timm's vit_small_patch16_224.dino, normalised by its ImageNet mean and std as theirs), a
# 384-d linear embedding after its class token (the ViT's width; their code evaluates the ViT's own
# 384-d features and its head's output, 128-d by default: --dims 128), batches of 900 = 100 classes
# x 9, AdamW lr 1e-5 at torch's weight decay 0.01 (they set none; Kim et al. 2023's HIER scripts
# give ViT-S/16 the same 0.01), random-resized 224 crops of 20-100 % of the area (as HIER's for a
# ViT) and mirroring, resize 256 and the centre 224 crop to evaluate. Their epoch is one batch of
# 100 classes x 9 (50 steps); here an epoch is a pass over the training images, 5 batches of 900 of
# CUB's 4,691 left after validation's fifth, so 10 epochs give their 50 steps. Their ImageNet-21k
# ViT-S/16 (`--model vit_small_patch16_224`) trains at lr 3e-5 (--backbone
# timm:vit_small_patch16_224.augreg_in21k_ft_in1k --lr 3e-5). They test the last epoch; here
# validation chooses it. A run cannot express: the hyperbolic embedding (the Poincare ball of
# curvature 0.1, features clipped at radius 2.3) and their pairwise cross-entropy at temperature 0.2
# (a loss of the harness instead), the patch embedding frozen, gradients clipped at norm 3, their
# mixed precision (apex O2; --precision fp16 is the harness's), bicubic resampling, the embedding
# layer's orthogonal initialisation.
VIT = Preset(
    dims=(384,),
    config=dict(
        backbone="timm:vit_small_patch16_224.dino",
        pretrained="imagenet",  # for a timm model: its tag's weights from timm's hub
        epochs=10,
        batch_size=900,
        m_per_class=9,
        optimizer="adamw",
        lr=1e-5,
        weight_decay=0.01,
        resize=256,
        crop=224,
        crop_mode="aspect",
        crop_scale="0.2,1",
    ),
    loss_params={"nngk": paper_nngk(sigma_for_dims)},
)
# Their other commands leave --resize at train.py's 224 (the centre 224 crop of the image resized
# to 224). Cars196: `--bs 882` (98 classes x 9) and `--ep 300` of one batch each, 300 steps: 43
# epochs of 7 batches of 882 of its 6,443 training images after validation's fifth.
VIT_CARS = replace(VIT, config={**VIT.config, "batch_size": 882, "epochs": 43, "resize": 224})
# Stanford Online Products and In-Shop: `--ep 200` and `--ep 400` at batches of 900 of 2 images a
# class (train.py's --num_samples 2), an epoch the training classes x 2: 25 batches on SOP (5,000
# steps), 8 on In-Shop (3,200 steps); here validation holds out a fifth of the training classes
# (their images are too few to hold out a share of each), which leaves about 47,600 SOP and
# 20,700 In-Shop images, about 52 and 23 batches of 900 a pass: 96 and 139 epochs.
VIT_LARGE = {"resize": 224, "m_per_class": 2, "val_split": "classes", "val_fraction": 0.2}
VIT_SOP = replace(VIT, config={**VIT.config, **VIT_LARGE, "epochs": 96})
VIT_INSHOP = replace(VIT, config={**VIT.config, **VIT_LARGE, "epochs": 139})

# What a named preset takes to the built-in sets (digits, glyphs), whose networks train from
# scratch: their own preset (small_cnn, its SGD and the learning rates chosen for it on
# validation, `bench.train.presets`), with the recipe's embedding size and what does not depend on
# ImageNet weights. proxy-anchor: 512-d over global average + max pooling; not frozen batch norm
# (a random init's statistics), the warm-up (which keeps the new layers' first gradients from an
# ImageNet network), AdamW at 1e-4 or the cuts, which are fine-tuning's. vit: 384-d; a ViT on
# glyphs is --backbone timm:vit_tiny_patch16_224 --pretrained none --crop 32
# (docs/protocols.md), at the glyphs preset's SGD unless --optimizer adamw is given.
SMALL_SETS: dict[str, tuple[tuple[int, ...], dict[str, Any]]] = {
    "proxy-anchor": ((512,), {"pooling": "avg+max"}),
    "vit": ((384,), {}),
}
# The named presets' own presets for data sets that differ from their first (CUB's).
BY_DATASET = {
    "proxy-anchor": (PROXY_ANCHOR, {"cars196": PROXY_ANCHOR_CARS, "sop": INSHOP, "inshop": INSHOP}),
    "vit": (VIT, {"cars196": VIT_CARS, "sop": VIT_SOP, "inshop": VIT_INSHOP}),
}
