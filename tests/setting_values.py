"""A value of each run setting other than what a CUB run of contrastive takes without it (CUB's
preset's: ImageNet weights, 4 a class, ...; else the field's default), the values valid together
on such a run: what the tests of what a setting does give it (it reaches the run, splits rows,
names the run). A setting added to RunConfig needs a value here; the tests that take every
setting say so."""

from __future__ import annotations

from typing import Any

OTHER: dict[str, Any] = {
    "protocol": "classify",
    "backbone": "resnet18",
    "pretrained": "none",
    "embedding": "gap",
    "pooling": "max",
    "epochs": 3,
    "warmup_epochs": 1,
    "batch_size": 32,
    "m_per_class": 8,
    "memory": 128,
    "optimizer": "rmsprop",
    "lr": 0.05,
    "embedding_lr": 2.0,
    "schedule": "cosine",
    "momentum": 0.5,
    "weight_decay": 0.01,
    "val_fraction": 0.3,
    "val_split": "classes",
    "train_per_class": 5,
    "clustering": "pml",
    "freeze_backbone": True,
    "freeze_bn": True,
    "precision": "bf16",
    "resize": 64,
    "crop": 56,
    "pad": 4,
    "crop_mode": "aspect",
    "crop_scale": "0.16,1",
    "preset": "proxy-anchor",
    "data_root": "/elsewhere",
    "data_location": "/data/x",
    "data_fingerprint": "abc123",
    "tuned": "study",
    "workers": 2,
    "log": "tensorboard",
}


def other(name: str) -> Any:
    """The value of `other` for the setting `name`; a failure naming the table for a setting
    that has none."""
    assert name in OTHER, f"the setting {name} needs a value in tests/setting_values.py OTHER"
    return OTHER[name]


def option_args(name: str, value: Any) -> list[str]:
    """The command line giving the setting `name` the value (a flag for True)."""
    flag = "--" + name.replace("_", "-")
    return [flag] if value is True else [flag, str(value)]
