"""A run's configuration as a plain dataclass; its hash names the run folder."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.util.names import safe_name

# Where the data lies, how it is loaded, which preset gave the defaults and where the run is
# logged do not change what a run computes.
NOT_HASHED = ("data_root", "workers", "preset", "log")
# Options added after runs were made: hashed only where they differ from these defaults, so that
# adding one keeps the names (and so the skip and resume) of every earlier run.
HASHED_IF_SET = {
    "val_split": "images",
    "data_location": "",
    "data_fingerprint": "",
    "tuned": "",
    "crop_mode": "squash",
}


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines a run; its hash names the run folder."""

    dataset: str = "digits"
    protocol: str = "metric"
    loss: str = "nngk"
    loss_params: dict[str, Any] = field(default_factory=dict)
    dims: int = 64
    backbone: str = "small_cnn"
    pretrained: str = "none"
    embedding: str = "fc"
    epochs: int = 20
    batch_size: int = 64
    m_per_class: int = 16
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 5e-4
    val_fraction: float = 0.2
    val_split: str = "images"  # or "classes": validation classes never trained on
    train_per_class: int = 0  # 0: every training image
    freeze_backbone: bool = False
    resize: int = 256
    crop: int = 224
    pad: int = 0
    crop_mode: str = "squash"  # or "aspect": aspect ratio kept, random-resized crops (crops.py)
    seed: int = 0
    preset: str = ""
    data_root: str = ""
    # Set from the data before a run starts (bench.data.identity): "" for the built-in sets.
    data_location: str = ""
    data_fingerprint: str = ""
    tuned: str = ""  # the Optuna study whose best parameters these are (`tune`)
    workers: int = 0
    log: str = "none"  # experiment log: none, tensorboard or mlflow (bench/train/tracking.py)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def run_id(self) -> str:
        unset = {k for k, default in HASHED_IF_SET.items() if getattr(self, k) == default}
        hashed = {k: v for k, v in self.to_dict().items() if k not in {*NOT_HASHED, *unset}}
        digest = hashlib.sha1(json.dumps(hashed, sort_keys=True).encode()).hexdigest()
        miner = self.loss_params.get("miner")
        name = f"{self.loss}-{miner}" if miner else self.loss
        dataset = safe_name(self.dataset)
        protocol = "" if self.protocol == "metric" else f"{self.protocol}-"
        return f"{dataset}-{protocol}{name}-d{self.dims}-s{self.seed}-{digest[:8]}"


def weights_label(pretrained: str) -> str:
    """How a run's weights read: 'random init', 'ImageNet', or a local weights file's name."""
    if pretrained == "none":
        return "random init"
    return "ImageNet" if pretrained == "imagenet" else Path(pretrained).name


def untrained_label(backbone: str, pretrained: str) -> str:
    """The untrained-network baseline's row name, e.g. 'untrained small_cnn (random init)'."""
    return f"untrained {backbone} ({weights_label(pretrained)})"
