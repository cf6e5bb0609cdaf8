"""Trials left RUNNING: under way in another worker, or left by a process that was killed. A
worker with no trial left to start waits for them before it calls the study done: it cannot
tell the two apart until the trial's heartbeat is `--grace` seconds old, when it fails the
trial and Optuna's retry callback puts its parameters back in the queue (bench.tune.storage)."""

from __future__ import annotations

import time
import warnings

import optuna
from optuna.storages import fail_stale_trials
from optuna.trial import FrozenTrial, TrialState

from bench.tune.pruning import counts
from bench.tune.storage import HEARTBEAT_S
from bench.util.progress import log


def under_way(study: optuna.Study) -> list[FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))


def queued(study: optuna.Study) -> list[FrozenTrial]:
    """Trials waiting for a worker: a stale trial's retry among them."""
    return study.get_trials(deepcopy=False, states=(TrialState.WAITING,))


def places_taken(study: optuna.Study, places: int) -> bool:
    """Whether the trials done and under way (or left RUNNING by a killed worker) fill the
    study's `places`, with no retry queued: a trial started now would only be skipped, and
    stored as PRUNED, a placeholder among the study's trials; the worker waits instead."""
    if queued(study):
        return False  # a retry waits for a worker: optimize takes it first
    return sum(map(counts, study.get_trials(deepcopy=False))) >= places


def wait_for_running(study: optuna.Study, grace_s: int, poll_s: float = HEARTBEAT_S) -> None:
    """Until no trial is RUNNING, or one is failed as stale and queued again to be retried."""
    running = under_way(study)
    if running:
        numbers = ", ".join(str(t.number) for t in running)
        log.info(
            f"{study.study_name}: waiting for trial {numbers}, under way in another process "
            f"or left by one that was killed (retried here once silent for {grace_s} s)"
        )
    while running and not queued(study):
        time.sleep(min(poll_s, grace_s))
        with warnings.catch_warnings():  # "experimental" since Optuna 2.9, stable for this use
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            fail_stale_trials(study)
        running = under_way(study)
