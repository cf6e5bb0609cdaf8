"""The harness's training step against a bare loop at the same batch (issue 44): images per
second of an epoch of the trainer on a folder of synthetic JPEGs (its loader, crops, sampler and
NNGK loss), against the same network and loss stepping on one batch held on the device; per
precision, both measured in one run (the rates: bench.train.step_rates, passed in)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import numpy as np
import torch

from bench.speed.loader import synthetic_jpegs
from bench.util.environ import environment

CLASSES = 20  # half train under the metric protocol


def cache_in(folder: Path) -> AbstractContextManager[None]:
    """$NNGK_CACHE set to `folder` for a while, then as it was."""
    return environment({"NNGK_CACHE": str(folder)})


def folder_set(root: Path, images: int, classes: int = CLASSES) -> Path:
    """`images` synthetic JPEGs in `classes` class folders: a `folder:` data set."""
    paths = synthetic_jpegs(root / "jpegs", count=images)
    for i, path in enumerate(paths):
        target = root / "set" / f"c{i % classes:03d}" / Path(path).name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(path, target)
    return root / "set"


def train_step_benchmark(
    rates: Callable[..., tuple[float, float, float, float]],
    backbone: str,
    batch: int,
    precisions: list[str],
    device: str,
    steps: int,
    tmp: Path,
    resize: int = 256,
    crop: int = 224,
    workers: int = 0,
) -> list[dict]:
    """Per precision: the harness's and the bare loop's images per second, and their ratio;
    the seconds the harness's epoch waited for its first batch, and the ratio had it not
    waited (`rates`: those four, as bench.train.step_rates.step_rates gives them)."""
    on = torch.device(device)
    root = folder_set(tmp, 2 * steps * batch)  # half the classes train: `steps` batches
    rows = []
    for name in precisions:
        with cache_in(tmp / "cache"):  # the images' cache goes with the folder
            run = tmp / f"run-{name}"
            rate = rates(root, backbone, batch, name, on, steps, resize, crop, run, workers)
        harness, bare, first, less_wait = rate
        rows.append(
            {
                "backbone": backbone,
                "batch": batch,
                "precision": name,
                "harness img/s": harness,
                "bare img/s": bare,
                "harness / bare": harness / bare,
                "first batch ms": 1e3 * first,
                "harness / bare, less that wait": less_wait / bare,
            }
        )
    fp32 = next((r for r in rows if r["precision"] == "fp32"), None)
    for row in rows:
        row["bare / bare fp32"] = row["bare img/s"] / fp32["bare img/s"] if fp32 else np.nan
    return rows
