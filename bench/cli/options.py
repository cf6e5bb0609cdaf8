"""What the commands share: option types checked by click, the results folder, the experiment
log (--log), integer lists."""

from __future__ import annotations

import errno
from pathlib import Path

import click

from bench.train.tracking import LOG_KINDS, require

DEFAULT_RESULTS = Path("results")
# Numeric options out of range fail in click, one line and exit 2, before any run folder exists.
POSITIVE = click.IntRange(min=1)
NON_NEGATIVE = click.FloatRange(min=0)
POSITIVE_FLOAT = click.FloatRange(min=0, min_open=True)
VAL_FRACTION = click.option(
    "--val-fraction",
    type=click.FloatRange(min=0, max=1, max_open=True),
    default=None,
    help="Share of the training images (or classes, --val-split classes) held out to choose "
    "the epoch; 0: train on all of them and test the last epoch, as the papers do.",
)


def check_log(ctx: click.Context, param: click.Parameter, kind: str) -> str:
    """--log's package present, before anything is written; else a one-line error naming the
    install."""
    try:
        require(kind)
    except ValueError as err:
        raise click.ClickException(str(err)) from None
    return kind


LOG = click.option(
    "--log",
    type=click.Choice(LOG_KINDS),
    default="none",
    show_default=True,
    callback=check_log,
    help="Log hyper-parameters, the training loss at each step and each epoch's metrics to "
    "TensorBoard (RUN/tensorboard/) or MLflow (RESULTS/mlflow.db, or $MLFLOW_TRACKING_URI); "
    "pip install 'nngk-bench[log]'. Does not change the run's id.",
)


# The integer lists the commands take: their least value and an example.
INT_LISTS = {
    "--dims": (1, "64,512,1024"),
    "--seed": (0, "0,1,2"),
    "--seeds": (0, "0,1,2"),
    "--eval-sizes": (1, "10000,50000"),
}


def parse_ints(text: str | None, what: str) -> tuple[int, ...] | None:
    """'64,512,1024' -> (64, 512, 1024); a one-line error for anything else, with an example
    of the option `what` (`INT_LISTS`)."""
    if text is None:
        return None
    least, example = INT_LISTS.get(what, (0, "1,2,3"))
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        values = ()
    if not values or min(values) < least:
        kind = "positive" if least == 1 else "non-negative"
        raise click.ClickException(
            f"bad {what} {text!r}; expected comma-separated {kind} integers, e.g. {example}"
        )
    return values


def os_error_line(err: OSError) -> str:
    """One line for a failed file operation: the file, what went wrong, what to do."""
    if err.errno is None or err.filename is None:
        return str(err).splitlines()[0] if str(err) else type(err).__name__
    where = err.filename
    if err.errno == errno.ENOSPC:
        return (
            f"{where}: no space left on the device; free some (or write to another disk, e.g. "
            "--results DIR or $NNGK_CACHE) and run the same command again to resume"
        )
    if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return (
            f"{where}: cannot write here ({err.strerror}); make it writable or choose another "
            "folder (--results DIR, --out DIR or $NNGK_CACHE)"
        )
    return f"{where}: {err.strerror}"
