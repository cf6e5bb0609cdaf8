"""What stops or paces a run: divergence, a validation split that cannot rank, the epochs'
seeds and their one-line summaries."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from bench.data.datasets import DataSplits
from bench.runs.config import RunConfig


class Diverged(ValueError):
    """A non-finite training loss or embedding: where it happened."""

    def __init__(self, epoch: int, step: int | str, value: float):
        self.epoch, self.step, self.value = epoch, step, value
        where = f"step {step}" if isinstance(step, int) else step
        super().__init__(f"epoch {epoch}, {where} (loss {value})")


class StepLosses:
    """The training loss of every step of an epoch, kept where it was computed and read every
    `every` steps, so that a GPU does not wait for the host at each step (on a CPU, `every` = 1
    costs nothing). The first non-finite one stops training (`Diverged`) naming its step; when
    `every` > 1 the few steps after it have already been taken, which does no harm: the run
    keeps the weights of its best finished epoch. `on_read` (an experiment log) gets each read's
    losses with the step of the first (1 = the epoch's first step)."""

    def __init__(
        self,
        epoch: int,
        every: int = 1,
        on_read: Callable[[int, np.ndarray], None] | None = None,
    ):
        self.epoch, self.every, self.on_read = epoch, every, on_read
        self.pending: list[torch.Tensor] = []
        self.total, self.count = 0.0, 0

    def add(self, value: torch.Tensor) -> None:
        self.pending.append(value.detach().reshape(()))
        if len(self.pending) >= self.every:
            self.check()

    def check(self) -> None:
        if not self.pending:
            return
        values = torch.stack(self.pending).double().cpu().numpy()
        if self.on_read is not None:
            self.on_read(self.count + 1, values)
        bad = np.flatnonzero(~np.isfinite(values))
        if len(bad):
            raise Diverged(self.epoch, self.count + int(bad[0]) + 1, float(values[bad[0]]))
        self.total += float(values.sum())
        self.count += len(values)
        self.pending = []

    def mean(self) -> float:
        self.check()
        return self.total / max(self.count, 1)


class DivergedAtStart(ValueError):
    """Training went non-finite before its first epoch finished: there is no model to keep."""


def epoch_seed(cfg: RunConfig, epoch: int) -> int:
    """Every epoch's randomness derives from the run seed and the epoch alone, so that a run
    resumed at an epoch boundary continues exactly as an uninterrupted one."""
    return cfg.seed * 100_003 + epoch


def check_validation(cfg: RunConfig, data: DataSplits) -> None:
    """A one-line error, before anything is written, when the validation split cannot rank:
    MAP@R needs a class with two items, or every epoch's score is NaN."""
    if cfg.val_fraction == 0 and cfg.protocol == "pairs":
        raise ValueError(
            "the pairs protocol chooses its verification threshold on validation images; "
            "give it a --val-fraction above 0"
        )
    if not len(data.val) and cfg.val_fraction == 0:
        return  # no validation asked for: the last epoch is tested
    _, counts = np.unique(np.asarray(data.val.labels), return_counts=True)
    if cfg.protocol != "classify" and not (counts >= 2).any():
        raise ValueError(
            f"the validation split of {cfg.dataset} has {len(data.val)} items and no class with "
            "two, so it cannot choose an epoch; use a data set with more images per class, or "
            "--val-split classes"
        )


def loss_trend(history: list[dict]) -> tuple[dict, list[str]]:
    """The training loss's relative change from the first epoch to the last, and a warning
    when it did not fall (by 1 % at least)."""
    losses = [row["train_loss"] for row in history]
    if len(losses) < 2 or not losses[0]:
        return {}, []
    change = (losses[-1] - losses[0]) / abs(losses[0])
    warnings = []
    if change > -0.01:
        warnings.append(
            f"the training loss did not decrease ({losses[0]:.4g} in epoch 1, "
            f"{losses[-1]:.4g} in epoch {len(losses)}): check the learning rate and "
            "the loss's parameters"
        )
    return {"train_loss_change": change}, warnings


def epoch_summary(run: str, row: dict, epochs: int, score: float) -> str:
    """One line per epoch: training loss, validation MAP@R and the selection score, seconds."""
    val = (
        f"validation MAP@R {row['val_map@r']:.4f}  score {score:.4f}"
        if "val_map@r" in row
        else "no validation"
    )
    return (
        f"{run}: epoch {row['epoch']}/{epochs}  train loss {row['train_loss']:.4f}  {val}  "
        f"({row['seconds']:.1f} s)"
    )
