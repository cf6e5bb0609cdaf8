"""What every loss's study gets alike (`TuneSetup`): its budget of trials and epochs, the
settings held, and the search space (the common settings and the loss's own parameters); its
study's name is made of them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bench.tune.choices import PRUNER_DEFAULT, STUDY_NAME_MAX
from bench.util.names import fitted_name, safe_name
from losses import get_loss_class

# Searched for every loss, beside the loss's own `search_space`.
COMMON_SPACE = {"lr": ("log", 1e-4, 1e-1), "weight_decay": ("log", 1e-6, 1e-2)}


@dataclass(frozen=True)
class TuneSetup:
    """The budget and setting every loss of a comparison gets alike."""

    dataset: str = "glyphs"
    dims: int = 64
    trials: int = 8
    epochs: int = 10  # each trial's, unless pruned (`tune` gives it the preset's)
    folds: int = 1
    seed: int = 0
    grace_s: int = 60  # a RUNNING trial without a heartbeat for this long is failed, retried
    pruner: str = PRUNER_DEFAULT  # bench.tune.pruning.PRUNERS
    epoch_budget: int | None = None  # the epochs a study may train, over all its trials
    # Loss parameters held fixed (`tune --loss-param`), by loss: not searched, in every run.
    fixed: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Run settings given to tune (--optimizer, --memory): in every trial and retrained run.
    settings: dict[str, Any] = field(default_factory=dict)
    data: str = ""  # a hash of the data's identity where it has one: changed data, a new study

    def study_name(self, loss: str) -> str:
        budget = f"d{self.dims}-t{self.trials}-e{self.epochs}-f{self.folds}-s{self.seed}"
        held = {**self.fixed.get(loss, {}), **self.settings}
        fixed = "".join(f"-{k}-{v}" for k, v in sorted(held.items()))
        # A pruner, a budget, data of files: named only where set, so earlier names stay.
        budget += f"-{self.pruner}" if self.pruner != "none" else ""
        budget += f"-b{self.epoch_budget}" if self.epoch_budget else ""
        tail = f"{loss}-{budget}{safe_name(fixed)}" + (f"-data-{self.data}" if self.data else "")
        return fitted_name(safe_name(self.dataset), tail, STUDY_NAME_MAX)

    @property
    def steps(self) -> int:
        """A trial's reports to the pruner when none prunes it: one per epoch of each fold."""
        return self.folds * self.epochs

    def space(self, loss: str) -> dict[str, tuple[str, float, float]]:
        """What the trials search for `loss`: the common settings and the loss's own
        parameters, but those held fixed."""
        space = {**COMMON_SPACE, **get_loss_class(loss).search_space}
        return {k: v for k, v in space.items() if k not in self.fixed.get(loss, {})}
