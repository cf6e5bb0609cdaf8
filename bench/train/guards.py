"""What stops, paces or warns about a run: divergence, the epochs' seeds and their one-line
summaries, a training loss that did not fall or never changed, a test below the run's own
network before training."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from bench.runs.config import RunConfig


class Diverged(ValueError):
    """A non-finite training loss or embedding: where it happened."""

    def __init__(self, epoch: int, step: int | str, value: float):
        self.epoch, self.step, self.value = epoch, step, value
        # A step names its loss; a named place (the validation embeddings) says what it found.
        where = f"step {step} (loss {value})" if isinstance(step, int) else step
        super().__init__(f"epoch {epoch}, {where}")

    def __reduce__(self):  # sent between processes (`decided_by_main`): made again from its place
        return type(self), (self.epoch, self.step, self.value)


class StepLosses:
    """The training loss of every step of an epoch, kept where it was computed and read every
    `every` steps, so that a GPU does not wait for the host at each step (on a CPU, `every` = 1
    costs nothing). The first non-finite one stops training (`Diverged`) naming its step; when
    `every` > 1 the few steps after it have already been taken, which does no harm: the run
    keeps the weights of its best finished epoch. `on_read` (an experiment log) gets each read's
    losses with the step of the first (1 = the epoch's first step). `low` and `high`: the least
    and greatest loss of a step so far (a loss that never changes trains nothing)."""

    def __init__(
        self,
        epoch: int,
        every: int = 1,
        on_read: Callable[[int, np.ndarray], None] | None = None,
    ):
        self.epoch, self.every, self.on_read = epoch, every, on_read
        self.pending: list[torch.Tensor] = []
        self.total, self.count = 0.0, 0
        self.low, self.high = math.inf, -math.inf

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
        self.low, self.high = min(self.low, values.min()), max(self.high, values.max())
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


def widen_steps(progress: dict, steps: StepLosses) -> None:
    """Keep in `progress` (and so in the checkpoint) how many steps the run has taken and the
    least and greatest loss of a step."""
    seen = progress.get("step_losses", {"steps": 0, "low": math.inf, "high": -math.inf})
    progress["step_losses"] = {
        "steps": seen["steps"] + steps.count,
        "low": min(seen["low"], float(steps.low)),
        "high": max(seen["high"], float(steps.high)),
    }


def flat_steps(seen: dict | None) -> list[str]:
    """A warning when the loss was 0, or one value, at every step: the network learnt nothing
    from it (a batch of one item a class has no positive pair; a margin no triplet violates)."""
    if not seen or not seen["steps"]:
        return []
    batch = "the batch (--batch-size, --m-per-class)"
    if seen["low"] == seen["high"] == 0:
        return [
            "the training loss was 0 at every step, so the network learnt nothing from it: "
            f"check {batch} and the loss's parameters (e.g. --margin)"
        ]
    if seen["steps"] > 1 and math.isclose(seen["low"], seen["high"], rel_tol=1e-6):
        return [
            f"the training loss was {seen['high']:.6g} at every step, so the network learnt "
            f"nothing from it: check the learning rate (--lr), {batch} and the loss's parameters"
        ]
    return []


def loss_trend(history: list[dict], steps: dict | None = None) -> tuple[dict, list[str]]:
    """The training loss's relative change from the first epoch to the last, and a warning
    when it did not fall (by 1 % at least), or (`steps`, see `widen_steps`) never changed."""
    warnings = flat_steps(steps)
    losses = [row["train_loss"] for row in history]
    if len(losses) < 2 or not losses[0]:
        return {}, warnings
    change = (losses[-1] - losses[0]) / abs(losses[0])
    if change > -0.01 and not warnings:
        warnings.append(
            f"the training loss did not decrease ({losses[0]:.4g} in epoch 1, "
            f"{losses[-1]:.4g} in epoch {len(losses)}): check the learning rate and "
            "the loss's parameters"
        )
    return {"train_loss_change": change}, warnings


def below_init(metrics: dict, lr: float) -> list[str]:
    """A warning where the test MAP@R ended below the run's untrained network's (the report's
    'MAP@R at init'): training made the embedding worse than the random start, as a learning
    rate too high for the loss does (the glyphs preset gives such losses 0.001, LOWER_LR)."""
    end = metrics.get("map@r")
    start = (metrics.get("untrained_network") or {}).get("map@r")
    numbers = all(isinstance(v, (int, float)) and math.isfinite(v) for v in (end, start))
    if not numbers or end >= start:
        return []
    return [
        f"the test MAP@R {end:.4f} is below this run's untrained network's {start:.4f}: "
        f"training made the embedding worse; try a lower learning rate (--lr, {lr:g} here) "
        "or check the loss's parameters"
    ]


def params_text(params: dict) -> str:
    """'l2_reg=-1, scale=1e+30': loss parameters as given; '' for none."""
    return ", ".join(f"{name}={value}" for name, value in sorted(params.items()))


def scaling_params_text(params: dict) -> str:
    """The loss parameters given that may make a loss non-finite, as `params_text` writes
    them: a miner chooses pairs and scales nothing."""
    return params_text({name: value for name, value in params.items() if name != "miner"})


def diverged_hint(lr: float, params: dict) -> str:
    """What may train a run that went non-finite: a lower learning rate, and where loss
    parameters were given, other values of them, which can make the loss itself non-finite
    (an ArcFace scale of 1e30) where no learning rate would train it."""
    hint = f"a learning rate below {lr:g} (--lr)"
    if given := scaling_params_text(params):
        hint += f", or other values of the loss parameters given ({given}),"
    return f"{hint} may train"


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
