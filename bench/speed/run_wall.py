"""A whole `run` against the sum of its epochs (issue 44): the seconds a command takes beside
training (loading and caching the data, the baselines, the untrained network's test, the final
test and writing), read from the runs' history.csv. The command is given to it to call (the
command line's `run`, in this process: its imports are not counted)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd


def run_wall_row(invoke: Callable[[list[str]], None], args: list[str], results: Path) -> dict:
    """Seconds of `invoke(args + --results results)` against the sum of the seconds of every
    epoch its runs recorded (a baseline records none)."""
    start = time.perf_counter()
    invoke([*args, "--results", str(results)])
    wall = time.perf_counter() - start
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
    }
