"""A whole `run` against the sum of its epochs (issue 44): the seconds a command takes beside
training (loading and caching the data, the baselines, the untrained network's test, the
checkpoints, the final test and writing), read from the runs' history.csv, and for one run
where they fall: before its first epoch, between its epochs, after its last, and which of the
run's log lines began the seconds before and after. The command is given to it to call (the
command line's `run`, in this process: its imports are not counted)."""

from __future__ import annotations

import logging
import re
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

EPOCH_LINE = re.compile(r": epoch \d+/\d+ ")  # the trainer's line at each epoch's end


class Stamps(logging.Handler):
    """Each line the harness logged, with the time (perf_counter) it was logged."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((time.perf_counter(), record.getMessage()))


def run_wall_row(invoke: Callable[[list[str]], None], args: list[str], results: Path) -> dict:
    """Seconds of `invoke(args + --results results)` against the sum of the seconds of every
    epoch its runs recorded (a baseline records none); `phases`: see `phases`."""
    stamps = Stamps()
    logger = logging.getLogger("nngk-bench")
    logger.addHandler(stamps)
    try:
        start = time.perf_counter()
        invoke([*args, "--results", str(results)])
        stop = time.perf_counter()
    finally:
        logger.removeHandler(stamps)
    wall = stop - start
    seconds = [pd.read_csv(h)["seconds"] for h in sorted(results.glob("*/history.csv"))]
    if not seconds:
        raise ValueError(f"`run {' '.join(args)}` trained no run: nothing to compare with")
    epochs = pd.concat(seconds)
    ends = [t for t, line in stamps.lines if EPOCH_LINE.search(line)]
    return {
        "runs": len(seconds),
        "epochs": len(epochs),
        "wall_s": wall,
        "sum of epochs_s": float(epochs.sum()),
        "wall / epochs": wall / float(epochs.sum()),
        "first epoch_s": float(seconds[0].iloc[0]),
        "median epoch_s": float(epochs.median()),
        **outside_epochs(ends, list(epochs), start, stop),
        "phases": phases(stamps.lines, ends, list(epochs), start, stop),
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


def phases(
    lines: list[tuple[float, str]], ends: list[float], seconds: list[float], start: float,
    stop: float,
) -> list[dict]:  # fmt: skip
    """One run's seconds before its first epoch began and after its last ended (`ends`: the
    times its epochs' lines were logged), span by span, each named by the log line that began
    it: [{"when", "seconds", "from the line"}]; none unless one run logged its epochs."""
    if len(ends) != len(seconds) or not ends:
        return []
    first = ends[0] - seconds[0]
    before = [(start, "(the command's start)"), *((t, x) for t, x in lines if t < first)]
    after = [(t, x) for t, x in lines if t >= ends[-1]]
    return spans(before, first, "before") + spans(after, stop, "after")


def spans(stamped: list[tuple[float, str]], until: float, when: str) -> list[dict]:
    times = [t for t, _ in stamped] + [until]
    return [
        {"when": when, "seconds": times[i + 1] - t, "from the line": label(x)}
        for i, (t, x) in enumerate(stamped)
    ]


def label(line: str) -> str:
    """A log line, shortened: without the run's id before it (a hyphenated name, ': ')."""
    name, colon, rest = line.partition(": ")
    return textwrap.shorten(rest if colon and "-" in name and " " not in name else line, 80)
