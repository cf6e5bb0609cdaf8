"""Pruned search: each trial reports its validation score after every epoch, and Optuna's
pruner stops the trials that trail the others at the same point; the epochs trained are counted.

A trial's step is its fold and epoch (`step = fold * epochs + epoch`), so trials are compared
only at the same fold and epoch; its value there is the fold's best validation score so far,
as its final score is the folds' mean best. Every epoch a trial trains is counted in the
trial's user attribute `epochs_trained` (a retried trial counts the epochs it trains itself),
so what a study spent is the sum over its trials, whatever their state.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import optuna
import pandas as pd
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import FrozenTrial, TrialState

from bench.train.trainer import Trainer

EPOCHS_TRAINED = "epochs_trained"
EPOCHS_REUSED = "epochs_reused"  # of runs found finished, read instead of trained
# Set on a trial that stopped before training (a duplicate, or a study already full): it
# neither counts against the budget nor was pruned for its scores.
SKIPPED = "skipped"
# Set on the study's first trial, the loss's shipped default: it reports but is never pruned,
# so that the chosen settings are at least as good as the default on validation.
DEFAULT = "shipped_default"
REDUCTION_FACTOR = 3  # Hyperband's and successive halving's: a third go on at each rung


def make_pruner(name: str, max_steps: int) -> optuna.pruners.BasePruner:
    """The pruner called `name` (PRUNERS) over trials of `max_steps` steps (folds x epochs)."""
    return PRUNERS[name](max_steps)


PRUNERS: dict[str, Callable[[int], optuna.pruners.BasePruner]] = {
    # Li et al. 2018: brackets of successive halving with different first rungs.
    "hyperband": lambda steps: optuna.pruners.HyperbandPruner(
        min_resource=1, max_resource=steps, reduction_factor=REDUCTION_FACTOR
    ),
    # Li et al. 2020 (asynchronous successive halving): rungs at 1, 3, 9, ... steps.
    "halving": lambda steps: optuna.pruners.SuccessiveHalvingPruner(
        min_resource=1, reduction_factor=REDUCTION_FACTOR
    ),
    "median": lambda steps: optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=1),
    "none": lambda steps: optuna.pruners.NopPruner(),
}


class ReportingTrainer(Trainer):
    """A trial's run: after each epoch's validation it counts the epoch in the trial, reports
    the fold's best score so far at step `offset + epoch`, and raises TrialPruned where the
    pruner says so (before the epoch's checkpoint: the trial ends there). Never at the
    trial's last step (`steps`): its training is done, and pruning would only lose its score."""

    def __init__(self, *args, trial: optuna.Trial, offset: int, steps: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.trial = trial
        self.offset = offset
        self.steps = steps
        self.best = float("-inf")

    def start_or_resume(self) -> dict:
        progress = super().start_or_resume()
        self.best = progress["best"]["score"]
        return progress

    def shared_validation(self, epoch: int) -> dict:
        val = super().shared_validation(epoch)
        count_epochs(self.trial)
        self.best = max(self.best, val["score"])
        step = self.offset + epoch
        self.trial.report(self.best, step)
        # Asked even for the default, which is never pruned: asking records its score at the
        # pruner's rung, where later trials are compared with it.
        prunable = DEFAULT not in self.trial.user_attrs
        if step < self.steps and self.trial.should_prune() and prunable:
            raise optuna.TrialPruned(
                f"{self.name}: pruned after epoch {epoch} (validation {self.best:.4f})"
            )
        return val


def count_epochs(trial: optuna.Trial, epochs: int = 1, attr: str = EPOCHS_TRAINED) -> None:
    """Add `epochs` to the trial's count `attr`: an epoch it trained, or (EPOCHS_REUSED) those
    of a run of the trial found finished by an earlier study, read, not trained."""
    trial.set_user_attr(attr, trial.user_attrs.get(attr, 0) + epochs)


def epochs_trained(trials: list[FrozenTrial], attr: str = EPOCHS_TRAINED) -> int:
    """The epochs the trials trained, whatever became of them. A trial retried after its
    worker was lost is left out: its retry took over its count (Optuna copies the user
    attributes), and goes on from it."""
    retried = {retried_from(t) for t in trials} - {None}
    return sum(int(t.user_attrs.get(attr, 0)) for t in trials if t.number not in retried)


def retried_from(trial: FrozenTrial) -> int | None:
    with warnings.catch_warnings():  # "experimental" since Optuna 2.8, stable for this use
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return RetryHeartbeatStaleTrialCallback.retried_trial_number(trial)


def retried_on_interrupt(objective: Callable[[optuna.Trial], float]):
    """The objective, its trial put back in the queue when a Ctrl-C (or SIGTERM) stops it, as
    a dead worker's trial is: Optuna fails it, and the next command would have gone on to the
    next point, the shipped default lost when it was the first. Its runs then resume from
    their checkpoints, and its epochs count once (`epochs_trained`)."""

    def run(trial: optuna.Trial) -> float:
        try:
            return objective(trial)
        except KeyboardInterrupt:
            (frozen,) = [t for t in trial.study.get_trials() if t.number == trial.number]
            with warnings.catch_warnings():  # "experimental" since Optuna 2.8
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                retry = RetryHeartbeatStaleTrialCallback(None, inherit_intermediate_values=True)
            retry(trial.study, frozen)
            raise

    return run


def counts(trial: FrozenTrial) -> bool:
    """Whether a trial takes a place of the study's trials: done, under way, or pruned by the
    pruner (not one that stopped before training, `SKIPPED`)."""
    if trial.state in (TrialState.COMPLETE, TrialState.RUNNING):
        return True
    return trial.state == TrialState.PRUNED and SKIPPED not in trial.user_attrs


def skip(trial: optuna.Trial, why: str) -> optuna.TrialPruned:
    """The exception that ends a trial before it trains, marked so that it does not count."""
    trial.set_user_attr(SKIPPED, why)
    return optuna.TrialPruned(why)


def ended(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """The trials that took their place and ended: complete, or pruned by the pruner."""
    return [t for t in trials if counts(t) and t.state != TrialState.RUNNING]


def savings(trials: list[FrozenTrial], steps: int) -> dict[str, int]:
    """What pruning saved: the epochs the trials trained (and those read from runs found
    finished), against the epochs the ended trials would have trained unpruned (`steps` each:
    folds x epochs)."""
    counted = ended(trials)
    return {
        "trials": len(counted),
        "pruned": sum(t.state == TrialState.PRUNED for t in counted),
        "epochs_trained": epochs_trained(trials),
        "epochs_reused": epochs_trained(trials, EPOCHS_REUSED),
        "epochs_unpruned": len(counted) * steps,
    }


def trials_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Optuna's table of a study's trials as `trials.csv` shows them: without the trials that
    stopped before training (no place, no parameters), each one's epochs trained and read."""
    if f"user_attrs_{SKIPPED}" in frame:
        frame = frame[frame[f"user_attrs_{SKIPPED}"].isna()]
    kept = {f"user_attrs_{name}": name for name in (EPOCHS_TRAINED, EPOCHS_REUSED)}
    attrs = [c for c in frame if c.startswith("user_attrs_") and c not in kept]
    frame = frame.drop(columns=attrs).rename(columns=kept).reset_index(drop=True)
    return frame.astype({name: "Int64" for name in kept.values() if name in frame})
