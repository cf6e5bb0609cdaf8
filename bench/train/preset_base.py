"""What the presets are made of (`bench.train.presets` holds the protocols' presets and the
named ones, `bench.train.recipe_presets` the field's recipes): a preset as plain data, NNGK's
settings for a network trained from scratch and for an ImageNet one, and what the large
retrieval sets' presets share."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from bench.runs.config import RunConfig


@dataclass(frozen=True)
class Preset:
    """A protocol's defaults for one data set; CLI options override them."""

    dims: tuple[int, ...]
    config: dict[str, Any]
    loss_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    loss_config: dict[str, dict[str, Any]] = field(default_factory=dict)  # e.g. a loss's lr


def sigma_for_dims(dims: int) -> float:
    """NNGK's sigma for the image protocols: the paper finds 10 to 30 good for 64 to 1024
    dimensions; squared distances grow with the number of dimensions, so sigma grows with it,
    interpolated log-linearly from 10 at 64 to 30 at 1024 (and on beyond)."""
    return round(10.0 * (dims / 64) ** (math.log(3) / math.log(16)), 2)


# NNGK on a network trained from scratch (digits, glyphs, feature heads, the Tiny ImageNet
# pair-verification report's network, and a paper protocol run with --pretrained none): sigma 1
# suits the scale such an embedding takes (the paper's 10 to 100, meant for ImageNet networks, leave
# its kernels flat: issue 14), a refresh every epoch.
SMALL_NETWORK_NNGK = {"sigma": 1.0, "k": 100, "update_interval": 1}


def paper_nngk(sigma: Any) -> dict[str, Any]:
    """The paper's NNGK settings (sigma, 100 neighbours, a refresh every 10 epochs) for a
    pretrained network, as the paper's; the from-scratch settings for a random init."""

    def pick(name: str) -> Any:
        def value(dims: int, cfg: RunConfig) -> Any:
            if cfg.pretrained == "none":
                return SMALL_NETWORK_NNGK[name]
            paper = {"sigma": sigma, "k": 100, "update_interval": 10}[name]
            return paper(dims) if callable(paper) else paper

        return value

    return {name: pick(name) for name in SMALL_NETWORK_NNGK}


# What the large retrieval sets' presets share: an ImageNet network, 4 images a class, resize 256
# with random-resized crops (224 unless said), validation on held-out training classes.
LARGE_RETRIEVAL = dict(
    pretrained="imagenet",
    m_per_class=4,
    resize=256,
    crop=224,
    crop_mode="aspect",
    val_split="classes",
    val_fraction=0.2,
)
