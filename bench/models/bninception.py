"""BN-Inception (Ioffe and Szegedy 2015, "Batch Normalization: Accelerating Deep Network
Training by Reducing Internal Covariate Shift", Figure 5): GoogLeNet's Inception with batch
norm after every convolution and each 5x5 convolution replaced by two 3x3, average or max
pooling in the blocks, blocks 3c and 4e of stride 2; the network of Musgrave et al. 2020's
Reality Check and Kim et al. 2020's Proxy Anchor, whose 1024-d pooled features go under the
embedding layer.

Its layers are named as the field's published ImageNet weights name them (Cadene's
`pretrainedmodels`, bn_inception-52deb4733.pth: `conv1_7x7_s2`, `conv1_7x7_s2_bn`,
`inception_3a_1x1`, ..., `inception_5b_pool_proj_bn`, and the classifier `last_linear`, dropped
here), every layer an attribute of the network itself, so that such a file loads strictly.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from bench.models.pooling import pool_layer
from bench.models.pretrained import load_local_state, one_line, read_state_dict
from bench.util.progress import log

NAME = "bninception"
WEIGHTS_URL = "http://data.lip6.fr/cadene/pretrainedmodels/bn_inception-52deb4733.pth"
CLASSIFIER = "last_linear."
# The harness's input normalisation (bench.data.crops, on a floor this module cannot import;
# tests/test_bninception.py holds the two alike).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# The published weights' input: BGR pixels in 0-255 less this mean, std 1 (pretrainedmodels'
# pretrained_settings: input_space BGR, input_range [0, 255]).
CAFFE_MEAN_BGR = (104.0, 117.0, 128.0)

# (name, input channels, output channels, kernel, stride) of the layers before the blocks.
STEM = (
    ("conv1_7x7_s2", 3, 64, 7, 2),
    ("conv2_3x3_reduce", 64, 64, 1, 1),
    ("conv2_3x3", 64, 192, 3, 1),
)
STEM_CHANNELS = 192


@dataclass(frozen=True)
class Inception:
    """One block, a row of the paper's Figure 5: its branches' channels (a 1x1; a 3x3 after a
    1x1 reduction; two 3x3 after one) and its pooling, then a 1x1 projection to `proj`
    channels. The stride-2 blocks (3c, 4e) have no 1x1 branch (`c1x1` 0) and pass their pooled
    map on as it is (`proj` 0)."""

    name: str
    c1x1: int
    reduce3: int
    out3: int
    reduce_double: int
    out_double: int
    pool: str  # "avg" or "max"
    proj: int
    stride: int = 1

    def prefix(self) -> str:
        return f"inception_{self.name}_"

    def convs(self, cin: int) -> list[tuple[str, int, int, int, int]]:
        """Its convolutions as STEM lists them, named as the published weights name them."""
        p, stride = self.prefix(), self.stride
        rows = [(f"{p}1x1", cin, self.c1x1, 1, 1)] if self.c1x1 else []
        rows += [
            (f"{p}3x3_reduce", cin, self.reduce3, 1, 1),
            (f"{p}3x3", self.reduce3, self.out3, 3, stride),
            (f"{p}double_3x3_reduce", cin, self.reduce_double, 1, 1),
            (f"{p}double_3x3_1", self.reduce_double, self.out_double, 3, 1),
            (f"{p}double_3x3_2", self.out_double, self.out_double, 3, stride),
        ]
        return rows + ([(f"{p}pool_proj", cin, self.proj, 1, 1)] if self.proj else [])

    def out_channels(self, cin: int) -> int:
        return self.c1x1 + self.out3 + self.out_double + (self.proj or cin)

    def __call__(self, net: BNInception, x: torch.Tensor) -> torch.Tensor:
        """The block on `x`, through `net`'s layers; its branches concatenated in the
        published order (1x1, 3x3, double 3x3, pool)."""
        p = self.prefix()
        branches = [net.unit(f"{p}1x1", x)] if self.c1x1 else []
        branches.append(net.unit(f"{p}3x3", net.unit(f"{p}3x3_reduce", x)))
        double = net.unit(f"{p}double_3x3_1", net.unit(f"{p}double_3x3_reduce", x))
        branches.append(net.unit(f"{p}double_3x3_2", double))
        pooled = self.pooled(x)
        branches.append(net.unit(f"{p}pool_proj", pooled) if self.proj else pooled)
        return torch.cat(branches, dim=1)

    def pooled(self, x: torch.Tensor) -> torch.Tensor:
        # As Caffe pools, the published model's origin: ceil mode, padded averages counted
        # over the whole window.
        if self.stride == 2:
            return F.max_pool2d(x, 3, 2, ceil_mode=True)
        if self.pool == "max":
            return F.max_pool2d(x, 3, 1, padding=1, ceil_mode=True)
        return F.avg_pool2d(x, 3, 1, padding=1, ceil_mode=True, count_include_pad=True)


BLOCKS = (
    Inception("3a", 64, 64, 64, 64, 96, "avg", 32),
    Inception("3b", 64, 64, 96, 64, 96, "avg", 64),
    Inception("3c", 0, 128, 160, 64, 96, "max", 0, stride=2),
    Inception("4a", 224, 64, 96, 96, 128, "avg", 128),
    Inception("4b", 192, 96, 128, 96, 128, "avg", 128),
    Inception("4c", 160, 128, 160, 128, 160, "avg", 128),
    Inception("4d", 96, 128, 192, 160, 192, "avg", 128),
    Inception("4e", 0, 128, 192, 192, 256, "max", 0, stride=2),
    Inception("5a", 352, 192, 320, 160, 224, "avg", 128),
    Inception("5b", 352, 192, 320, 192, 224, "max", 128),
)


class BNInception(nn.Module):
    """The network up to its last feature map (1024 channels, 1/32 of the input's side), on
    input as the published weights take it: BGR pixels 0-255 less CAFFE_MEAN_BGR (CaffeInput
    makes it from the harness's)."""

    def __init__(self) -> None:
        super().__init__()
        for row in STEM:
            self.add_conv(*row)
        channels = STEM_CHANNELS
        for block in BLOCKS:
            for row in block.convs(channels):
                self.add_conv(*row)
            channels = block.out_channels(channels)
        self.out_channels = channels

    def add_conv(self, name: str, cin: int, cout: int, kernel: int, stride: int) -> None:
        """A convolution (with a bias, as the published weights have) and its batch norm."""
        self.add_module(name, nn.Conv2d(cin, cout, kernel, stride, padding=kernel // 2))
        self.add_module(f"{name}_bn", nn.BatchNorm2d(cout))

    def unit(self, name: str, x: torch.Tensor) -> torch.Tensor:
        """Convolution `name`, its batch norm, ReLU."""
        return F.relu(getattr(self, f"{name}_bn")(getattr(self, name)(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(self.unit("conv1_7x7_s2", x), 3, 2, ceil_mode=True)
        x = self.unit("conv2_3x3", self.unit("conv2_3x3_reduce", x))
        x = F.max_pool2d(x, 3, 2, ceil_mode=True)
        for block in BLOCKS:
            x = block(self, x)
        return x


class CaffeInput(nn.Module):
    """The harness's input (RGB, normalised by ImageNet's mean and std, as bench.data.crops
    gives every backbone but a timm model) made the published weights' (BGR, 0-255, less
    CAFFE_MEAN_BGR): here in the network, so that whatever feeds it ImageNet's normalisation
    feeds it right. Its constants are no part of the state dict."""

    def __init__(self) -> None:
        super().__init__()
        scale = torch.tensor(IMAGENET_STD[::-1]) * 255
        shift = torch.tensor(IMAGENET_MEAN[::-1]) * 255 - torch.tensor(CAFFE_MEAN_BGR)
        self.register_buffer("scale", scale.view(1, 3, 1, 1), persistent=False)
        self.register_buffer("shift", shift.view(1, 3, 1, 1), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flip(1) * self.scale + self.shift


def takes_size(size: int) -> bool:
    """Whether the network takes square inputs of this side. Its stride-2 blocks (3c, 4e) join
    a padded convolution's map (of side ceil(n/2)) to an unpadded max pool's in ceil mode (of
    side ceil((n-1)/2)), one side only where n is even, as 224's 28 and 14 are: so for sides of
    32k-1 to 32k+6 px, k >= 1 (tests/test_bninception.py checks it against the network)."""
    return size >= 31 and (size + 1) % 32 < 8


def check_size(size: int) -> None:
    """A one-line ValueError for a crop side the network cannot take (`takes_size`)."""
    if takes_size(size):
        return
    below = [s for s in range(31, size) if takes_size(s)][-1:]
    above = next(s for s in range(size, size + 32) if takes_size(s))
    raise ValueError(
        f"bninception cannot take {size}-px crops: its stride-2 blocks need maps of even side, "
        f"which crops of 32k-1 to 32k+6 px give; give such a --crop, e.g. "
        f"{' or '.join(map(str, [*below, above]))} (224 as published)"
    )


def published_state(net: BNInception, state: Mapping[str, torch.Tensor]) -> dict:
    """A state dict of the published layout as `net` takes it: the classifier dropped; a batch
    norm's count of batches, which files saved before PyTorch 0.4.1 lack, 0 where missing (as
    torch's own loading of such files sets it); vectors saved as (1, C), as the earlier ports
    of these weights saved their batch norms' (and Kim et al. 2020's code squeezes), made (C,)."""
    expected = net.state_dict()
    kept = {k: v for k, v in state.items() if not k.startswith(CLASSIFIER)}
    for key, want in expected.items():
        got = kept.get(key)
        if got is None and key.endswith(".num_batches_tracked"):
            kept[key] = torch.zeros_like(want)
        elif got is not None and want.dim() == 1 and tuple(got.shape) == (1, len(want)):
            kept[key] = got.reshape(want.shape)
    return kept


def build_bninception(
    pretrained: str = "none", pooling: str = "avg", image_size: int | None = None
) -> tuple[nn.Sequential, int]:
    """(CaffeInput, BNInception, the pooling, flatten) and its feature size, 1024.

    pretrained: "none" (torch's default initialisation), "imagenet" (or "hub": the published
    file, `fetch_imagenet`) or a PATH to a state dict in the published layout (its
    `last_linear` dropped). pooling: of the last map (`bench.models.pooling`). image_size: the
    crop's side, checked (`check_size`)."""
    if image_size is not None:
        check_size(image_size)
    net = BNInception()
    if pretrained in ("imagenet", "hub"):
        pretrained = fetch_imagenet()
    if pretrained != "none":
        state = published_state(net, read_state_dict(NAME, pretrained))
        load_local_state(net, NAME, pretrained, source="the published layout of", state=state)
    head = nn.Sequential(CaffeInput(), net, pool_layer(pooling), nn.Flatten())
    return head, net.out_channels


def imagenet_file() -> str:
    """Where torch keeps the published ImageNet weights once downloaded (torchvision's too)."""
    return os.path.join(torch.hub.get_dir(), "checkpoints", os.path.basename(WEIGHTS_URL))


def fetch_imagenet() -> str:
    """The published ImageNet weights' file in torch's cache: there already, or downloaded now
    (Cadene's pretrainedmodels, as Musgrave et al. 2020 and Kim et al. 2020 use it); a one-line
    RuntimeError saying where to get it and where to put it where it cannot be had (offline)."""
    path = imagenet_file()
    if os.path.isfile(path):
        return path
    log.info(f"downloading BN-Inception's ImageNet weights into {path}")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        torch.hub.download_url_to_file(WEIGHTS_URL, path, progress=False)
    except (OSError, RuntimeError, ValueError) as err:
        raise RuntimeError(
            f"BN-Inception's ImageNet weights are not in {path} and could not be downloaded "
            f"({one_line(err)}); get {WEIGHTS_URL} on a machine with a network "
            "and put it there, or give it as --pretrained PATH"
        ) from None
    return path


def check_bninception(pretrained: str, image_size: int | None = None) -> None:
    """Before any data is read: the crop side, and the weights (a file read and matched)."""
    if image_size is not None:
        check_size(image_size)
    if pretrained != "none":
        build_bninception(pretrained)
