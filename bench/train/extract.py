"""Features of a frozen backbone (Sharma et al. 2015's CNN features) for every image of a data
set."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import torch

from bench.data.datasets import DataSplits
from bench.data.feature_files import SPLITS
from bench.models.embed import embed
from bench.models.embedding import build_model
from bench.train.loaders import load_data
from bench.train.presets import make_configs
from bench.util.names import fitted_name, safe_name
from bench.util.runtime import seed_everything

FEATURES_DIR = Path("results") / "features"


def default_features_path(
    dataset: str, protocol: str, backbone: str, pretrained: str, **given: object
) -> Path:
    """results/features/<dataset>-<protocol>-<backbone>-<weights>.npz, and the `given` settings
    that change the features where set (--resize 64: '-resize-64'), so that an extraction of
    other settings is never taken for this one's file; cut to fit a file name."""
    weights = safe_name(
        Path(pretrained).stem if pretrained not in ("imagenet", "none") else pretrained
    )
    shown = {k: v for k, v in given.items() if v not in (None, "", 0)}
    if "data_root" in shown:  # a folder: its hash
        shown["data_root"] = hashlib.sha1(str(shown["data_root"]).encode()).hexdigest()[:8]
    settings = "".join(f"-{k.replace('_', '-')}-{v}" for k, v in shown.items())
    tail = f"{protocol}-{backbone}-{weights}{safe_name(settings)}.npz"
    return FEATURES_DIR / fitted_name(safe_name(dataset), tail)


def _split_features(model: torch.nn.Module, data: DataSplits, device: torch.device):
    for name, split in zip(SPLITS, (data.train_eval, data.val, data.test), strict=True):
        if len(split) == 0:
            continue
        feats, labels = embed(model, split, device, features=True)
        # VGG16's and AlexNet's backbone output is FC7 before its ReLU; Sharma et al. 2015 uses it
        # after. The other backbones end in a ReLU or a pool of one, where this changes nothing.
        yield torch.relu(feats).numpy(), labels, np.full(len(labels), name)


def extract_features(
    dataset: str,
    backbone: str,
    pretrained: str,
    protocol: str,
    data_root: str | None,
    device: torch.device,
    seed: int,
    **overrides,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(features, labels, split) of every image of a data set under a protocol, through a
    frozen backbone in evaluation mode on `device` (as the command resolved it); images are
    loaded as the protocol's preset says (`overrides`, e.g. resize and crop, replace its
    values)."""
    (cfg,) = make_configs(
        dataset,
        "features",
        (1,),
        {},
        protocol=protocol,
        backbone=backbone,
        pretrained=pretrained,
        data_root=data_root,
        seed=seed,
        **overrides,
    )
    data = load_data(cfg)
    seed_everything(seed)  # the random initialisation of pretrained="none"
    model = build_model(backbone, 1, pretrained, data.in_channels, image_size=cfg.crop)
    model = model.to(device)
    parts = list(_split_features(model, data, device))
    return tuple(np.concatenate(arrays) for arrays in zip(*parts, strict=True))
