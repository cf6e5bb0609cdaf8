"""The network's input from a batch of cached images: crop, resize, mirror and normalise, made
for the whole batch at once on the batch's device (the GPU when training runs there).

Every crop is a box in the cached image (shorter side `resize`, aspect ratio kept) resampled to
crop x crop by `roi_align`, which averages several bilinear samples per output pixel when the
box is larger (a box of exactly crop x crop pixels is copied unchanged). Two protocols:

- "squash" (Meyer et al. 2018 §3.1, Liu et al. 2019 §2: "256x256 images", random 224 crops and
  mirroring): the image stretched to resize x resize, a crop at whole-pixel offsets from it
  (zero-padded by `pad` pixels a side where the protocol says so); the centre crop for evaluation.
- "aspect" (the random-resized crop of torchvision's ImageNet recipe, as the metric-learning
  reality check trains): a box of random area (`scale` of the image) and aspect ratio (`ratio`)
  resized to crop x crop; the centre crop of the aspect-kept image for evaluation.

Outside an image the pixels are zero (black), as torchvision's padded crops fill them.

Memory: a batch is one zero canvas holding each image with its longer side along the width
(`pad_batch`; portrait images are transposed there and their crops transposed back), so the
canvas is the batch's largest shorter side by its largest longer side, whatever the images'
orientations. The cache (`bench.data.image_cache`) keeps the shorter side at most `resize` and
the longer side at most MAX_ASPECT x `resize`, so a batch of B cached images is at most
B x 3 x resize x (MAX_ASPECT * resize) bytes (256 images at resize 256: 201 MB), and the float32
copy `roi_align` reads four times that, however extreme the images' aspect ratios.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import NamedTuple

import torch

from bench.data.crop_area import DEFAULT_SCALE

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CROP_MODES = ("squash", "aspect")
TRIES = 10  # random-resized crop: boxes drawn before falling back to the centre (torchvision)


class RaggedBatch(NamedTuple):
    """Images of different sizes as one uint8 tensor: each at the top left of a zero canvas,
    portrait ones transposed (their longer side along the canvas's width)."""

    pixels: torch.Tensor  # (B, 3, H, W) uint8
    sizes: torch.Tensor  # (B, 2) int64: each image's height and width (as given, not transposed)

    @property
    def transposed(self) -> torch.Tensor:
        """(B,) bool: the image is on the canvas transposed (it is taller than wide), computed
        where the sizes are (on the device, without a copy from the host)."""
        return self.sizes[:, 0] > self.sizes[:, 1]

    def to(self, device: torch.device | str, non_blocking: bool = False) -> RaggedBatch:
        return RaggedBatch(*(t.to(device, non_blocking=non_blocking) for t in self))

    def __len__(self) -> int:  # the number of images, as for a tensor batch
        return len(self.pixels)


def pad_batch(images: list[torch.Tensor]) -> RaggedBatch:
    """(3, h, w) uint8 images as one RaggedBatch: a canvas of the largest shorter side by the
    largest longer side (a 10x1000 and a 1000x10 image need 10x1000, not 1000x1000)."""
    sizes = torch.tensor([tuple(img.shape[1:]) for img in images], dtype=torch.int64).view(-1, 2)
    short, long = sizes.min(dim=1).values, sizes.max(dim=1).values
    height, width = (int(short.max()), int(long.max())) if len(images) else (0, 0)
    batch = RaggedBatch(torch.zeros((len(images), 3, height, width), dtype=torch.uint8), sizes)
    for canvas, img, turn in zip(batch.pixels, images, batch.transposed.tolist(), strict=True):
        img = img.transpose(1, 2) if turn else img
        canvas[:, : img.shape[1], : img.shape[2]] = img
    return batch


@dataclass(frozen=True)
class Crops:
    """How a split's cached images become the network's input (see the module's docstring)."""

    crop: int
    resize: int
    mode: str = "squash"
    train: bool = False
    pad: int = 0
    flip: bool = True
    scale: tuple[float, float] = DEFAULT_SCALE  # torchvision's RandomResizedCrop's
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    # The normalisation the backbone expects (a timm model's own, `bench.models`); ImageNet's.
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD

    def __post_init__(self) -> None:
        if self.mode not in CROP_MODES:
            raise ValueError(f"unknown crop mode {self.mode!r}; expected one of {CROP_MODES}")

    def __call__(
        self, batch: RaggedBatch, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """(B, 3, crop, crop) float32 images, normalised (`mean`, `std`), on the batch's
        device."""
        boxes = self.boxes(batch.sizes.to(torch.float64), generator)
        turned = batch.transposed
        swapped = boxes.view(-1, 2, 2).flip(-1).reshape(-1, 4)  # y1, x1, y2, x2
        boxes = torch.where(turned[:, None], swapped, boxes)
        # One zero pixel around the canvas, so that samples outside an image read zero.
        pixels = torch.nn.functional.pad(batch.pixels, (1, 1, 1, 1)).float()
        index = torch.arange(len(boxes), device=boxes.device, dtype=torch.float64)
        rois = torch.cat([index[:, None], boxes + 1], dim=1).to(pixels)
        # here, not at the top: torchvision's import (with torch._dynamo's) costs each command
        # 1.3 CPU seconds, and the built-in sets (glyphs, digits) never crop
        from torchvision.ops import roi_align

        out = roi_align(pixels, rois, self.crop, sampling_ratio=-1, aligned=True)
        out = torch.where(turned[:, None, None, None], out.transpose(-1, -2), out)
        if self.train and self.flip:
            mirror = uniform(len(out), generator, out.device) < 0.5
            out = torch.where(mirror[:, None, None, None], out.flip(-1), out)
        mean, std = pixel_statistics(out.device, tuple(self.mean), tuple(self.std))
        return (out - mean) / std

    def boxes(self, sizes: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """(B, 4) boxes x1, y1, x2, y2 in the cached images' pixels, for (B, 2) heights, widths."""
        if self.mode == "squash":
            return self.squash_boxes(sizes, generator)
        if self.train:
            return self.random_resized_boxes(sizes, generator)
        return centre_boxes(sizes, self.crop)

    def squash_boxes(self, sizes: torch.Tensor, generator) -> torch.Tensor:
        """A crop x crop square of the image stretched to resize x resize, mapped back."""
        n = len(sizes)
        if self.train:
            lo, hi = -self.pad, self.resize - self.crop + self.pad
            span = max(hi - lo + 1, 1)
            offsets = lo + torch.floor(uniform(2 * n, generator, sizes.device) * span).view(n, 2)
        else:  # torchvision's CenterCrop rounds the offset; made on the device (no copy)
            offset = float(round((self.resize - self.crop) / 2))
            offsets = torch.full((n, 2), offset, dtype=sizes.dtype, device=sizes.device)
        scale = sizes / self.resize  # cached pixels per stretched pixel: (y, x)
        start = offsets * scale
        end = (offsets + self.crop) * scale
        return torch.stack([start[:, 1], start[:, 0], end[:, 1], end[:, 0]], dim=1)

    def random_resized_boxes(self, sizes: torch.Tensor, generator) -> torch.Tensor:
        """torchvision's RandomResizedCrop boxes for every image at once: up to TRIES boxes of
        random area and aspect ratio, the first that fits; else the centre, ratio clamped."""
        n, device = len(sizes), sizes.device
        h, w = sizes[:, :1], sizes[:, 1:]
        u = self.draw(n, generator, device)
        area = h * w * (self.scale[0] + (self.scale[1] - self.scale[0]) * u)
        log_lo, log_hi = math.log(self.ratio[0]), math.log(self.ratio[1])
        aspect = torch.exp(log_lo + (log_hi - log_lo) * self.draw(n, generator, device))
        cw, ch = torch.round(torch.sqrt(area * aspect)), torch.round(torch.sqrt(area / aspect))
        fits = (cw > 0) & (cw <= w) & (ch > 0) & (ch <= h)
        first = fits.to(torch.int8).argmax(dim=1, keepdim=True)
        cw, ch = cw.gather(1, first).squeeze(1), ch.gather(1, first).squeeze(1)
        ok = fits.any(dim=1)
        fw, fh = fallback_size(sizes, self.ratio)
        cw, ch = torch.where(ok, cw, fw), torch.where(ok, ch, fh)
        u = uniform(2 * n, generator, device).view(n, 2)
        y0 = torch.where(ok, torch.floor(u[:, 0] * (sizes[:, 0] - ch + 1)), (sizes[:, 0] - ch) / 2)
        x0 = torch.where(ok, torch.floor(u[:, 1] * (sizes[:, 1] - cw + 1)), (sizes[:, 1] - cw) / 2)
        x0, y0 = torch.where(ok, x0, torch.round(x0)), torch.where(ok, y0, torch.round(y0))
        return torch.stack([x0, y0, x0 + cw, y0 + ch], dim=1)

    def draw(self, n: int, generator, device: torch.device) -> torch.Tensor:
        return uniform(n * TRIES, generator, device).view(n, TRIES)


@functools.cache
def pixel_statistics(
    device: torch.device, mean: tuple = IMAGENET_MEAN, std: tuple = IMAGENET_STD
) -> tuple[torch.Tensor, torch.Tensor]:
    """A mean and standard deviation (ImageNet's) in pixel units, (3, 1, 1) on `device`: copied
    there once, since each copy from the host waits for a GPU to finish what it is doing."""
    mean = torch.tensor(mean)[:, None, None] * 255
    std = torch.tensor(std)[:, None, None] * 255
    return mean.to(device), std.to(device)


def uniform(n: int, generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """n uniform draws in [0, 1) from `generator` (made on its device), float64 on `device`."""
    source = generator.device if generator is not None else device
    return torch.rand(n, generator=generator, device=source, dtype=torch.float64).to(device)


def centre_boxes(sizes: torch.Tensor, crop: int) -> torch.Tensor:
    """The centre crop x crop square of each image, offsets rounded as CenterCrop does."""
    offsets = torch.round((sizes - crop) / 2)
    return torch.stack(
        [offsets[:, 1], offsets[:, 0], offsets[:, 1] + crop, offsets[:, 0] + crop], dim=1
    )


def fallback_size(sizes: torch.Tensor, ratio: tuple[float, float]):
    """RandomResizedCrop's fallback: the whole image, its aspect ratio clamped into `ratio`."""
    h, w = sizes[:, 0], sizes[:, 1]
    in_ratio = w / h
    fw = torch.where(in_ratio > ratio[1], torch.round(h * ratio[1]), w)
    fh = torch.where(in_ratio < ratio[0], torch.round(w / ratio[0]), h)
    return fw, fh
