"""A backbone pretrained with softmax on glyphs classes the benchmark never sees, for
`run --pretrained PATH` (issue 25: a pretrained start without downloads).

The source is a glyphs range of its own (`glyphs:first=1000,classes=1000`: classes 1000-1999 of
seed 0, disjoint from the benchmark's 0-199 by construction, bench/data/glyphs.py). A share of
each class's images is held out to measure the classifier; the backbone's state dict is written
with its provenance (PATH.json) beside it, which names the weights in a run's records and report.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from bench.data.glyphs import GlyphSpec, load_glyphs
from bench.data.names import PRETRAIN_SOURCE as SOURCE
from bench.data.names import is_glyphs
from bench.models.choices import PRETRAIN_BACKBONES
from bench.models.embedding import EmbeddingNet, build_model
from bench.runs.weights import provenance_label, provenance_path
from bench.util.atomic import atomic_torch_save, atomic_write_json
from bench.util.hashing import file_sha256
from bench.util.progress import log
from bench.util.runtime import seed_everything

BENCHMARK = GlyphSpec()  # the default set, classes 0-199 of seed 0
# torchvision's model is written whole, with its 1000-way classifier, as `--pretrained PATH`
# reads torchvision backbones; the source's classes take its first outputs.
TORCHVISION = {"resnet18": 1000}


@dataclass(frozen=True)
class PretrainConfig:
    dataset: str = SOURCE
    backbone: str = "small_cnn"
    epochs: int = 10
    lr: float = 0.05
    batch_size: int = 128
    seed: int = 0
    val_share: float = 0.1  # of each class's images, held out
    momentum: float = 0.9
    weight_decay: float = 5e-4


def source_spec(cfg: PretrainConfig) -> tuple[GlyphSpec, str]:
    """The source's glyphs set, and a note where its seed is not the benchmark's; a one-line
    ValueError for a source that shares classes with the benchmark or a backbone not offered."""
    if cfg.backbone not in PRETRAIN_BACKBONES:
        raise ValueError(
            f"pretrain trains {', '.join(PRETRAIN_BACKBONES)}; got --backbone {cfg.backbone!r}"
        )
    if not is_glyphs(cfg.dataset):
        raise ValueError(f"pretrain takes a glyphs source (e.g. {SOURCE}); got {cfg.dataset!r}")
    spec = GlyphSpec.parse(cfg.dataset)
    outputs = TORCHVISION.get(cfg.backbone, spec.classes)
    if spec.classes > outputs:
        raise ValueError(
            f"{cfg.backbone} is written as torchvision's model of {outputs} classes; give a "
            f"source of {outputs} classes or fewer, not {spec.classes}"
        )
    if not 0 < cfg.val_share < 1:
        raise ValueError(f"the held-out share must lie between 0 and 1; got {cfg.val_share}")
    source, bench = spec.class_indices(), BENCHMARK.class_indices()
    if spec.seed != BENCHMARK.seed:
        return spec, (
            f"{spec.name()} is of glyphs seed {spec.seed}, the benchmark's is {BENCHMARK.seed}: "
            "its classes are other glyphs than the benchmark's, whatever their numbers"
        )
    if BENCHMARK.shares_classes(spec.seed, source):
        raise ValueError(
            f"{spec.name()} holds classes {source.start}-{source.stop - 1}, which share "
            f"{bench.start}-{bench.stop - 1} with the benchmark ({BENCHMARK.name()}); start at "
            f"first={bench.stop} or beyond (e.g. {SOURCE})"
        )
    return spec, ""


def holdout(labels: np.ndarray, share: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(training rows, validation rows): `share` of each class's images (one at least, and
    one left to train on) held out at random."""
    rng = np.random.default_rng(seed)
    held = np.zeros(len(labels), dtype=bool)
    for label in np.unique(labels):
        rows = np.flatnonzero(labels == label)
        count = min(len(rows) - 1, max(1, round(share * len(rows))))
        held[rng.choice(rows, size=count, replace=False)] = True
    return np.flatnonzero(~held), np.flatnonzero(held)


def train_epoch(
    model: nn.Module, images: torch.Tensor, labels: torch.Tensor, optimizer, batch_size: int
) -> float:
    """One pass over the training images in a random order (a progress bar where it is long);
    the mean cross-entropy."""
    model.train()
    order = torch.randperm(len(labels))
    total = 0.0
    starts = range(0, len(order), batch_size)
    for start in tqdm(starts, desc="steps", leave=False, disable=len(starts) < 50):
        rows = order[start : start + batch_size]
        if len(rows) < 2:  # a batch of one: BatchNorm has no statistics to take
            continue
        loss = F.cross_entropy(model(images[rows]), labels[rows])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        total += loss.item() * len(rows)
    return total / len(order)


@torch.no_grad()
def accuracy(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, batch: int) -> float:
    model.eval()
    hits = sum(
        (model(images[i : i + batch]).argmax(1) == labels[i : i + batch]).sum().item()
        for i in range(0, len(labels), batch)
    )
    return hits / len(labels)


def backbone_state(model: EmbeddingNet, backbone: str) -> dict[str, torch.Tensor]:
    """What `--pretrained PATH` loads: SmallCNN's state dict, or torchvision's whole model (its
    classifier, `fc`, is the one trained here)."""
    state = {k: v.detach().cpu().clone() for k, v in model.backbone.state_dict().items()}
    if backbone in TORCHVISION:
        state["fc.weight"] = model.embed.weight.detach().cpu().clone()
        state["fc.bias"] = model.embed.bias.detach().cpu().clone()
    return state


def check_trained(state: dict[str, torch.Tensor], losses: list[float], cfg: PretrainConfig) -> None:
    """A ValueError, before anything is written, for weights that are not a training's: NaN
    or infinite ones (it diverged), or none trained at all (no batch of two)."""
    finite = all(v.isfinite().all() for v in state.values() if v.is_floating_point())
    if not finite or not np.isfinite(losses).all():
        raise ValueError(
            f"pretraining diverged (NaN or infinite weights at --lr {cfg.lr:g}); nothing was "
            "written: give a lower --lr"
        )
    if not any(losses):  # every batch skipped: one image each, no BatchNorm statistics
        raise ValueError(
            f"pretraining trained nothing (no batch of two images at --batch-size "
            f"{cfg.batch_size}); nothing was written: give --batch-size 2 or more"
        )


def pretrain(cfg: PretrainConfig, out: Path, device: torch.device) -> dict:
    """Train on `device` (as the command resolved it), then write the backbone's weights to
    `out` and their provenance beside it (`provenance_path`); the provenance."""
    spec, note = source_spec(cfg)
    if note:
        log.info(note)
    seed_everything(cfg.seed)
    raw, labels = load_glyphs(spec)
    # A float32 copy of the read-only cache: torch warns on a tensor over a read-only array.
    images = torch.from_numpy(np.asarray(raw, dtype=np.float32)).div_(255.0).unsqueeze(1)
    train, val = holdout(labels, cfg.val_share, cfg.seed)
    train_x, val_x = images[train].to(device), images[val].to(device)
    train_y, val_y = (torch.from_numpy(labels[rows]).to(device) for rows in (train, val))
    outputs = TORCHVISION.get(cfg.backbone, spec.classes)
    model = build_model(cfg.backbone, outputs, "none", in_channels=1).to(device)
    optimizer = torch.optim.SGD(
        model.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay
    )
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, max(1, cfg.epochs))
    first, last = spec.first, spec.class_indices()[-1]
    log.info(
        f"pretraining {cfg.backbone} on {spec.name()} (classes {first}-{last}): {len(train)} "
        f"training and {len(val)} held-out images, {cfg.epochs} epoch(s) on {device}"
    )
    started, losses, accuracies = time.perf_counter(), [], []
    for epoch in range(cfg.epochs):
        losses.append(train_epoch(model, train_x, train_y, optimizer, cfg.batch_size))
        schedule.step()
        accuracies.append(accuracy(model, val_x, val_y, cfg.batch_size))
        log.info(
            f"epoch {epoch + 1}/{cfg.epochs}: loss {losses[-1]:.4f}, held-out accuracy "
            f"{accuracies[-1]:.3f} ({time.perf_counter() - started:.0f} s)"
        )
    state = backbone_state(model, cfg.backbone)
    check_trained(state, losses, cfg)
    # The old provenance goes first: weights without one read by their file name, never by
    # another file's provenance.
    provenance_path(out).unlink(missing_ok=True)
    atomic_torch_save(out, state)
    record = {
        **asdict(cfg),
        "source": spec.name(),
        "classes": [first, last],
        "glyphs_seed": spec.seed,
        "images": {"train": len(train), "held_out": len(val)},
        "in_channels": model.in_channels,
        "train_loss": losses,
        "val_accuracy": accuracies,
        "seconds": round(time.perf_counter() - started, 1),
        "torch": torch.__version__,
        "weights": Path(out).name,
        "sha256": file_sha256(out),
    }
    record["label"] = provenance_label(record)
    atomic_write_json(provenance_path(out), record)
    return record
