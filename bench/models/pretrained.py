"""torchvision's classification models as backbones: ImageNet weights through torchvision's
weights API, or a local state dict (loaded with weights_only=True, or a safetensors file), cut
before their classifier."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

import torch
from torch import nn

from bench.models.choices import BackboneSpec
from bench.util.progress import log
from bench.util.weights_files import SAFETENSORS, weights_format

_PRETRAINED_HINT = (
    "expected 'imagenet', 'none', 'hub' (a timm backbone's), or a path to a state dict"
)
_RESAVE = "re-save the weights alone with torch.save(model.state_dict(), PATH)"


def one_line(err: BaseException) -> str:
    return " ".join(str(err).split())


def tv_models():
    """torchvision.models, imported where a torchvision backbone is used: its import (with
    torch._dynamo's) costs each command 1.3 CPU seconds, and small_cnn needs none of it."""
    import torchvision.models

    return torchvision.models


def imagenet_file(name: str) -> str:
    """Where torch keeps torchvision's ImageNet weights of `name` once downloaded."""
    weights = tv_models().get_model_weights(name).DEFAULT
    return os.path.join(torch.hub.get_dir(), "checkpoints", os.path.basename(weights.url))


def fetch_imagenet(name: str) -> None:
    """torchvision's ImageNet weights of `name` in torch's cache: there already, or downloaded
    now; a one-line RuntimeError saying what to do where they cannot be had (offline)."""
    path = imagenet_file(name)
    if os.path.isfile(path):
        return
    log.info(f"downloading torchvision's ImageNet weights for {name} into {path}")
    try:
        tv_models().get_model_weights(name).DEFAULT.get_state_dict(progress=False)
    except (OSError, RuntimeError, ValueError) as err:
        raise RuntimeError(
            f"ImageNet weights for {name} are not in {path} and could not be downloaded "
            f"({one_line(err)}); put that file there, or give --pretrained PATH (a state "
            "dict) or --pretrained none (random init)"
        ) from None


def check_weights(name: str, pretrained: str) -> None:
    """That the weights a torchvision backbone starts from can be had, before any data is read:
    ImageNet's in torch's cache (downloaded if need be), or a local state dict that reads."""
    if pretrained == "imagenet":
        fetch_imagenet(name)
    elif pretrained != "none":
        read_state_dict(name, pretrained)


def _load_imagenet(name: str) -> nn.Module:
    weights = tv_models().get_model_weights(name).DEFAULT
    try:
        # No extra kwargs: torchvision then picks the settings these weights expect (for GoogLeNet
        # transform_input=True, and its aux heads, which it drops after loading).
        return tv_models().get_model(name, weights=weights)
    except (OSError, RuntimeError) as err:
        hub_dir = os.path.join(torch.hub.get_dir(), "checkpoints")
        raise RuntimeError(
            f"could not fetch ImageNet weights {weights} for {name} ({one_line(err)}); "
            f"pass --pretrained PATH with a local state dict, or put the weights file "
            f"into {hub_dir}"
        ) from err


def read_state_dict(name: str, path: str) -> Mapping[str, torch.Tensor]:
    """A state dict for backbone `name` read safely (torch.load with weights_only, or a
    safetensors file, by its first bytes); a one-line error (a
    FileNotFoundError or ValueError) for a file that is missing or holds anything else."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"pretrained={path!r} is not a file; {_PRETRAINED_HINT}")
    try:
        state = _load_file(path)
    except ImportError as err:
        raise ValueError(f"pretrained={path!r}: {err}") from None
    except Exception as err:  # unpickling raises many different types
        raise ValueError(
            f"pretrained={path!r} is not a readable PyTorch state dict for {name} "
            f"({_load_problem(err)}); {_RESAVE}"
        ) from None
    if not isinstance(state, Mapping) or not all(
        isinstance(v, torch.Tensor) for v in state.values()
    ):
        raise ValueError(
            f"pretrained={path!r} does not hold a state dict (a mapping of tensors) for {name} "
            f"but {_describe(state)}; {_RESAVE}"
        )
    broken = [k for k, v in state.items() if v.is_floating_point() and not v.isfinite().all()]
    if broken:
        raise ValueError(
            f"pretrained={path!r} holds NaN or infinite weights ({len(broken)} of "
            f"{len(state)} tensors, e.g. {broken[0]}): a training that diverged; "
            "pretrain again at a lower --lr, or give other weights"
        )
    return state


def _load_file(path: str) -> object:
    """What a weights file holds: a safetensors file's tensors, or what torch.save wrote
    (unpickled safely)."""
    if weights_format(path) != SAFETENSORS:
        return torch.load(path, map_location="cpu", weights_only=True)
    try:
        from safetensors.torch import load_file
    except ImportError:
        raise ImportError(
            "a safetensors file needs the safetensors package: pip install safetensors"
        ) from None
    return load_file(path, device="cpu")


def _load_problem(err: BaseException) -> str:
    """Why torch.load(weights_only=True) refused a file, without torch's advice to load it with
    weights_only=False, which would run whatever code the file holds."""
    if isinstance(err, OSError) and err.strerror:
        return f"cannot read it: {err.strerror}"
    found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(err))
    if found:
        return f"it pickles {found.group(1)}; a safe load reads tensors and plain containers only"
    return "damaged, or not written by torch.save"


def _describe(state: object) -> str:
    if not isinstance(state, Mapping):
        return f"a {type(state).__name__}"
    others = [repr(k) for k, v in state.items() if not isinstance(v, torch.Tensor)]
    return f"a mapping with non-tensor values under {', '.join(others[:3])}"


def load_local_state(
    model: nn.Module,
    name: str,
    path: str,
    source: str = "torchvision's",
    state: Mapping[str, torch.Tensor] | None = None,
) -> None:
    """The state dict at `path` (or `state`, read from it already) loaded into `model`, every
    key and shape alike; a one-line ValueError naming the file and what differs otherwise."""
    state = read_state_dict(name, path) if state is None else state
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    shapes = sorted(k for k in set(state) & set(expected) if state[k].shape != expected[k].shape)
    problems = [
        f"{len(keys)} {what} (e.g. {keys[0]})"
        for what, keys in (
            ("missing keys", missing),
            ("unexpected keys", unexpected),
            ("shape mismatches", shapes),
        )
        if keys
    ]
    if problems:
        raise ValueError(
            f"state dict {path!r} does not match {source} {name}: {'; '.join(problems)}"
        )
    model.load_state_dict(state)


def truncate(model: nn.Module, cut: str) -> nn.Module:
    """The model without its classifier: the layer `cut` replaced by the identity, or for
    "fc7" the classifier cut after FC7 (`BackboneSpec.cut`)."""
    if cut != "fc7":
        setattr(model, cut, nn.Identity())
        return model
    # vgg16 classifier:   [Linear, ReLU, Dropout, Linear(FC7), ReLU, Dropout, Linear]
    # alexnet classifier: [Dropout, Linear, ReLU, Dropout, Linear(FC7), ReLU, Linear]
    # The embedding is FC7 with dropout but without the ReLU after it (as in the NNGK paper).
    linears = [i for i, m in enumerate(model.classifier) if isinstance(m, nn.Linear)]
    fc7 = linears[1]
    return nn.Sequential(
        model.features,
        model.avgpool,
        nn.Flatten(),
        *list(model.classifier.children())[: fc7 + 1],
    )


def torchvision_model(spec: BackboneSpec, pretrained: str) -> nn.Module:
    """torchvision's model of the spec with its ImageNet weights, its own init (`none`), or a
    local file's weights (those of the keys it ignores dropped)."""
    name = spec.torchvision
    if pretrained == "imagenet":
        return _load_imagenet(name)
    options = dict(spec.options) | (dict(spec.file_options) if pretrained != "none" else {})
    model = tv_models().get_model(name, weights=None, **options)
    if pretrained != "none":
        state = read_state_dict(name, pretrained)
        state = {k: v for k, v in state.items() if not k.startswith(spec.ignored)}
        load_local_state(model, name, pretrained, state=state)
    return model


def keep_resolution(model: nn.Module) -> None:
    # The report's ResNets for 64x64 inputs: conv1 at stride 1 and no first max-pool. conv1 keeps
    # its 7x7 kernel and padding 3, so loaded (e.g. ImageNet) weights still apply.
    model.conv1.stride = (1, 1)
    model.maxpool = nn.Identity()
