"""A whole `run` against the sum of its epochs (issue 44): the seconds a command takes beside
training (loading and caching the data, the baselines, the untrained network's test, the
checkpoints, the final test and writing), read from the runs' history.csv, and for one run
where they fall: before its first epoch, between its epochs, after its last. The command is
given to it to call (the command line's `run`, in this process: its imports are not counted)."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

EPOCH_LINE = re.compile(r": epoch \d+/\d+ ")  # the trainer's line at each epoch's end


class EpochEnds(logging.Handler):
    """The times (perf_counter) at which the trainer logged each epoch's end."""

    def __init__(self) -> None:
        super().__init__()
        self.times: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        if EPOCH_LINE.search(record.getMessage()):
            self.times.append(time.perf_counter())


def run_wall_row(invoke: Callable[[list[str]], None], args: list[str], results: Path) -> dict:
    """Seconds of `invoke(args + --results results)` against the sum of the seconds of every
    epoch its runs recorded (a baseline records none)."""
    ends = EpochEnds()
    logger = logging.getLogger("nngk-bench")
    logger.addHandler(ends)
    try:
        start = time.perf_counter()
        invoke([*args, "--results", str(results)])
        stop = time.perf_counter()
    finally:
        logger.removeHandler(ends)
    wall = stop - start
    seconds = [pd.read_csv(h)["seconds"] for h in sorted(results.glob("*/history.csv"))]
    if not seconds:
        raise ValueError(f"`run {' '.join(args)}` trained no run: nothing to compare with")
    epochs = pd.concat(seconds)
    return {
        "runs": len(seconds),
        "epochs": len(epochs),
        "wall_s": wall,
        "sum of epochs_s": float(epochs.sum()),
        "wall / epochs": wall / float(epochs.sum()),
        "first epoch_s": float(seconds[0].iloc[0]),
        "median epoch_s": float(epochs.median()),
        **outside_epochs(ends.times, list(epochs), start, stop),
    }


def outside_epochs(ends: list[float], seconds: list[float], start: float, stop: float) -> dict:
    """Of one run's seconds outside its epochs: those before its first epoch began (loading,
    caching, the baselines, the untrained network's test), those between its epochs (the
    checkpoints), those after its last (the test, writing); NaN unless one run logged them."""
    if len(ends) != len(seconds) or not ends:
        return dict.fromkeys(("before_s", "between_s", "after_s"), float("nan"))
    before = ends[0] - seconds[0] - start
    after = stop - ends[-1]
    return {
        "before_s": before,
        "between_s": (stop - start) - sum(seconds) - before - after,
        "after_s": after,
    }
