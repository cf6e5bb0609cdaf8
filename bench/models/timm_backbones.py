"""Any timm model as the backbone (`--backbone timm:NAME`): its pooled pre-logits features
(timm's num_classes=0), its input size and normalisation from its pretrained configuration, a
model of one input size (a ViT: its position embedding) built for the run's crop, and its
weights from timm's hub (`--pretrained hub`) or from a local file (safetensors or a torch
state dict), loaded strictly. timm is imported inside these functions only: its import takes
seconds, which no other backbone pays."""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import ModuleType

import torch
import torch.nn.functional as F
from torch import nn

from bench.models.choices import TIMM_PREFIX
from bench.models.pretrained import load_local_state, read_state_dict
from bench.util.errors import did_you_mean, first_line

INSTALL = 'pip install -e ".[timm]"'
# The weights timm fetches from its hub: those of NAME's pretrained tag (timm's default tag where
# NAME has none). "imagenet", which the image presets ask for, means the same for a timm model:
# most default tags are ImageNet-trained, and a tag (timm:NAME.dino) chooses others.
HUB_WEIGHTS = ("hub", "imagenet")
CNN_MIN_SIZE = 32  # a side that five stride-2 stages leave a map of; a model's own where it says


@dataclass(frozen=True)
class TimmInput:
    """What a timm model's pretrained configuration says of its input."""

    size: int  # the side it was trained at
    crop_pct: float  # the centre crop's share of the resized image (timm's evaluation)
    mean: tuple[float, ...]
    std: tuple[float, ...]
    fixed: bool  # takes its own input size only (a ViT's position embedding)
    min_size: int  # the least side a model of any input size takes


class TimmBackbone(nn.Module):
    """A timm model's pooled features; a model of one input size (`size`) is given inputs
    resized to it (a small tensor set's images; the crops are that size already)."""

    def __init__(self, model: nn.Module, size: int | None, min_size: int) -> None:
        super().__init__()
        self.model, self.size, self.min_size = model, size, min_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.size is not None and tuple(x.shape[-2:]) != (self.size, self.size):
            x = F.interpolate(x, size=(self.size, self.size), mode="bilinear", align_corners=False)
        return self.model(x)


def timm_module() -> ModuleType:
    """timm; a one-line ValueError naming the install where it is not installed."""
    try:
        import timm
    except ImportError:
        raise ValueError(f"a timm backbone needs timm, which is not installed: {INSTALL}") from None
    return timm


def model_name(backbone: str) -> str:
    """'vit_small_patch16_224.dino' for 'timm:vit_small_patch16_224.dino'."""
    return backbone[len(TIMM_PREFIX) :]


def check_timm_backbone(backbone: str) -> None:
    """A one-line ValueError unless timm is installed and has the model (and its tag), naming
    the models or tags closest to one it has not."""
    timm = timm_module()
    name = model_name(backbone)
    arch, _, tag = name.partition(".")
    if not timm.is_model(arch):
        raise ValueError(
            f"timm has no model {arch!r}{did_you_mean(arch, timm.list_models())}; "
            "timm.list_models('*vit*') lists its models"
        )
    tags = timm.list_pretrained(f"{arch}.*")
    if tag and name not in tags:
        raise ValueError(
            f"timm has no weights {name!r}{did_you_mean(name, tags)}; the tags of {arch}: "
            f"{', '.join(t.partition('.')[2] for t in tags) or 'none'}"
        )


def timm_input(backbone: str) -> TimmInput:
    """The model's input as its pretrained configuration gives it (timm's defaults where the
    model has none): what `timm.data.resolve_model_data_config` gives for the model."""
    timm = timm_module()
    check_timm_backbone(backbone)
    found = timm.models.get_pretrained_cfg(model_name(backbone))
    given = found.to_dict() if found is not None else {}
    data = timm.data.resolve_data_config({}, pretrained_cfg=given)
    least = given.get("min_input_size") or (3, CNN_MIN_SIZE, CNN_MIN_SIZE)
    return TimmInput(
        size=int(data["input_size"][1]),
        crop_pct=float(data["crop_pct"]),
        mean=tuple(float(v) for v in data["mean"]),
        std=tuple(float(v) for v in data["std"]),
        fixed=bool(given.get("fixed_input_size", False)),
        min_size=int(least[1]),
    )


def input_settings(backbone: str, resize: int | None, crop: int | None) -> dict[str, int]:
    """--resize and --crop for a timm backbone: those given; where not, the model's input size
    as crop, and as resize the side timm's evaluation resizes to for that crop (crop / its
    crop_pct, rounded down)."""
    spec = timm_input(backbone)
    crop = crop or spec.size
    return {"resize": resize or math.floor(crop / spec.crop_pct), "crop": crop}


def build_timm(
    backbone: str, pretrained: str = "none", image_size: int | None = None
) -> tuple[TimmBackbone, int]:
    """The model without its classifier (its pooled pre-logits features) and their size.

    pretrained: "none" (timm's random init), "hub" or "imagenet" (`HUB_WEIGHTS`), or a path
    to a safetensors file or torch state dict of the model (its classifier's keys, which
    num_classes=0 leaves out, are dropped). image_size: the side of the run's crops; a model
    of one input size is built for it where it differs from its own."""
    spec = timm_input(backbone)
    size = image_size or spec.size
    fixed = size if spec.fixed else None
    model = _create(backbone, pretrained in HUB_WEIGHTS, spec, fixed)
    if pretrained not in ("none", *HUB_WEIGHTS):
        load_timm_weights(model, backbone, pretrained)
    min_size = 0 if spec.fixed else spec.min_size
    return TimmBackbone(model, fixed, min_size), int(model.num_features)


def _create(backbone: str, hub: bool, spec: TimmInput, size: int | None) -> nn.Module:
    """timm's model (its hub weights where `hub`), of input side `size` where that is given
    and not its own; one-line errors where the weights cannot be fetched or the size is not
    one it takes."""
    name = model_name(backbone)
    resized = size is not None and size != spec.size
    extra = {"img_size": size} if resized else {}
    if hub:
        check_hub_weights(name)
    try:
        model = timm_module().create_model(name, pretrained=hub, num_classes=0, **extra)
        if resized:
            _try_input(model, size)
    except OSError as err:  # the hub's and torch.hub's download errors
        if not hub:
            raise
        raise RuntimeError(offline_message(name, err)) from None
    except (TypeError, ValueError, RuntimeError, AssertionError) as err:
        if not resized:
            raise
        raise ValueError(
            f"{backbone} cannot take {size}-px input (--crop {size}): {first_line(err)}; give "
            f"a --crop it takes, e.g. its own {spec.size}"
        ) from None
    return model


def _try_input(model: nn.Module, size: int) -> None:
    """A forward pass of one blank image of the size, in eval mode (no statistic changes):
    a size the model cannot take fails here, before any data is read."""
    training = model.training
    with torch.no_grad():
        model.eval()(torch.zeros(1, 3, size, size))
    model.train(training)


def hub_file(name: str) -> tuple[str, str]:
    """(the hub repository, its file) that timm fetches the weights `name` from; ("", url)
    for weights only at a URL; ("", "") for a model without weights."""
    found = timm_module().models.get_pretrained_cfg(name)
    if found is None:
        return "", ""
    if found.hf_hub_id:
        return found.hf_hub_id, found.hf_hub_filename or "model.safetensors"
    return "", found.url or ""


def check_hub_weights(name: str) -> None:
    """A one-line ValueError for a model of which timm has no weights to fetch."""
    if hub_file(name) == ("", ""):
        raise ValueError(
            f"timm has no pretrained weights for {name}; give --pretrained none (random init) "
            "or a weights file PATH"
        )


def offline_message(name: str, err: BaseException) -> str:
    """Why the hub's weights could not be had, and how to get them onto this machine."""
    repo, file = hub_file(name)
    get = (
        f"on a machine with a network run `hf download {repo} {file} --local-dir weights/{name}` "
        f"(huggingface_hub's CLI) and give --pretrained weights/{name}/{file}, or copy its "
        "Hugging Face cache (~/.cache/huggingface/hub, or $HF_HOME/hub) here"
        if repo
        else f"download {file} on a machine with a network and give --pretrained PATH"
    )
    return (
        f"timm's hub weights for {name} are not in the Hugging Face cache and could not be "
        f"downloaded ({first_line(err)}); {get}"
    )


def load_timm_weights(model: nn.Module, backbone: str, path: str) -> None:
    """The weights file at `path` (safetensors or a torch state dict) loaded into the model,
    every key and shape alike but those of the classifier that num_classes=0 left out; a
    one-line ValueError naming what differs otherwise."""
    state = read_state_dict(backbone, path)
    heads = getattr(model, "pretrained_cfg", {}).get("classifier") or ()
    prefixes = tuple(f"{h}." for h in ((heads,) if isinstance(heads, str) else heads))
    expected = model.state_dict()
    kept = {k: v for k, v in state.items() if k in expected or not k.startswith(prefixes)}
    load_local_state(model, model_name(backbone), path, source="timm's", state=kept)


def check_timm_weights(backbone: str, pretrained: str, image_size: int | None = None) -> None:
    """Before any data is read: timm installed and the model known; where it has weights to
    load or a size of its own to be built for, the model built as a run builds it (its hub
    weights fetched into the cache, or the one-line error of a machine offline; its weights
    file read and matched; the size tried)."""
    spec = timm_input(backbone)
    if pretrained != "none" or (spec.fixed and (image_size or spec.size) != spec.size):
        build_timm(backbone, pretrained, image_size)
