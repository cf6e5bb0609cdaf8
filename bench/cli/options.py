"""What the commands share, each declared once: their own options (--loss, --dataset, --dims,
--seed, --results, --force, --device, --nproc; the run settings are in `bench.cli.settings`),
option types checked by click, integer lists, one-line file errors. Light: `nngk-bench --help`
imports it."""

from __future__ import annotations

import errno
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

import click

from bench.cli.loss_sets import LOSS_HELP

DEFAULT_RESULTS = Path("results")


class FiniteFloat(click.FloatRange):
    """click's FloatRange that refuses NaN and infinity too (a NaN passes every bound: it is
    neither below nor above one), so that no run records a setting of NaN."""

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        value = super().convert(value, param, ctx)
        if not math.isfinite(value):
            self.fail(f"{value} is not a finite number", param, ctx)
        return value


# Numeric options out of range fail in click, one line and exit 2, before any run folder exists.
POSITIVE = click.IntRange(min=1)
NON_NEGATIVE = FiniteFloat(min=0)
POSITIVE_FLOAT = FiniteFloat(min=0, min_open=True)

# The integer lists the commands take: their least value and an example; a seed is at most
# 2**31 - 1, as faiss's k-means and numpy's legacy generator take it.
INT_LISTS = {
    "--dims": (1, "64,512,1024"),
    "--seed": (0, "0,1,2"),
    "--seeds": (0, "0,1,2"),
    "--eval-sizes": (1, "10000,50000"),
    "--scale-sizes": (1, "100000,1000000"),
}
MOST = {"--seed": 2**31 - 1, "--seeds": 2**31 - 1}


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
    most = MOST.get(what)
    if not values or min(values) < least or (most is not None and max(values) > most):
        kind = "positive" if least == 1 else "non-negative"
        below = f" up to {most:,}" if most is not None else ""
        raise click.ClickException(
            f"bad {what} {text!r}; expected comma-separated {kind} integers{below}, e.g. {example}"
        )
    return values


@contextmanager
def click_errors(*kinds: type[Exception], line: Callable[[Exception], str] = str) -> Iterator[None]:
    """The block's errors of `kinds` (ValueError where none is named: what the checks raise)
    as one line of click's, `line` of each (its message; `first_line` for one that may carry
    more lines, a RuntimeError's or a FileNotFoundError's)."""
    caught = kinds or (ValueError,)
    try:
        yield
    except caught as err:
        raise click.ClickException(line(err)) from None


def stacked(*options: Callable) -> Callable:
    """A decorator adding `options` (click's option decorators) in their order."""

    def add(command: Callable) -> Callable:
        for option in reversed(options):
            command = option(command)
        return command

    return add


def int_list(what: str) -> Callable:
    """A callback parsing an option's comma-separated integers (`parse_ints`)."""
    return lambda ctx, param, text: parse_ints(text, what)


# The commands' own options, shared by `run`, `suite` and `tune` where they mean the same.
LOSS = click.option("--loss", default="nngk", show_default=True, help=LOSS_HELP)
# The emoji sets' parameters ({held}: held_out where the command takes --protocol cross-style).
EMOJI_HELP = "emoji[:size=N,min_sets=N,sets=A+B,classes=N{held}] (installed by npm, {note})"


def dataset_help(protocols: bool = True) -> str:
    """The data sets `--dataset` takes; without `protocols` (tune, which searches under the
    metric protocol alone) none that needs another protocol (inshop, emoji's held_out)."""
    inshop = "inshop (with --protocol query-gallery), " if protocols else ""
    emoji = EMOJI_HELP.format(
        held=",held_out=A+B" if protocols else "",
        note="docs/protocols.md" + ("; held_out with --protocol cross-style" if protocols else ""),
    )
    return (
        f"glyphs[:classes=N,...], digits, cars196, cub, tinyimagenet, flowers102, leafsnap, "
        f"sop, {inshop}inaturalist, {emoji}, folder:PATH (one sub-folder per class) or "
        "features:PATH.npz. A folder gets the metric preset (GoogLeNet with ImageNet weights, "
        "256/224 px); offline, without those weights in torch's cache, add e.g. --backbone "
        "small_cnn --pretrained none --resize 64 --crop 56."
    ) + ("" if protocols else " tune searches under the metric protocol.")


DATASET = click.option("--dataset", default="glyphs", show_default=True, help=dataset_help())
# tune's: it has no --protocol, so its help names no data set or parameter that needs one.
TUNE_DATASET = click.option(
    "--dataset", default="glyphs", show_default=True, help=dataset_help(protocols=False)
)


def dims_option(
    text: str = "Embedding sizes, e.g. 64,512,1024 (one run each).", default: str | None = None
) -> Callable:
    """--dims, comma-separated sizes; by default None (the preset's)."""
    return click.option(
        "--dims",
        default=default,
        show_default=default is not None,
        callback=int_list("--dims"),
        help=text,
    )


def seed_option(default: str, text: str = "Seed(s), e.g. 0 or 0,1,2: one run each.") -> Callable:
    """--seed (or --seeds, tune's older spelling): one run per seed. `run` defaults to one
    seed (a run to look at), `suite` and `tune` to three (what a comparison reports, with the
    spread between seeds)."""
    return click.option(
        "--seed",
        "--seeds",
        "seeds",
        default=default,
        show_default=True,
        callback=int_list("--seed"),
        help=text,
    )


RESULTS = click.option(
    "--results",
    type=click.Path(path_type=Path, file_okay=False),
    default=DEFAULT_RESULTS,
    show_default=True,
)


def check_results_folder(results: Path) -> None:
    """A one-line error where --results cannot be made: a file where one of its folders
    belongs, or a folder it cannot write in (checked before the first run is trained, not
    when its baseline is written)."""
    existing = Path(results).expanduser().absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise click.ClickException(
            f"--results {results}: {existing} is a file, not a folder; give --results a folder"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise click.ClickException(
            f"--results {results}: cannot write in {existing}; make it writable or give "
            "--results another folder"
        )


FORCE = click.option("--force", is_flag=True, help="Redo finished runs from scratch.")
DEVICE = click.option("--device", default=None, help="cpu or cuda (default: cuda when available).")
NPROC = click.option(
    "--nproc",
    type=POSITIVE,
    default=1,
    show_default=True,
    help="Processes training each run together (DistributedDataParallel through torchrun; "
    "one GPU each on a GPU machine).",
)


def check_out_writable(out: Path) -> None:
    """A one-line ValueError where no file can be written beside `out` (--out of `features`
    and `pretrain`), checked before the work that the first write would lose."""
    from bench.util.atomic import check_writable

    try:
        check_writable(out.parent)
    except OSError as err:
        raise ValueError(
            f"--out {out}: its folder cannot be written ({err.strerror or err}); give a path in "
            "a folder you can write"
        ) from None


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
    if err.errno in (errno.EFBIG, errno.EDQUOT):
        return (
            f"{where}: {err.strerror} (a limit on a file's size, `ulimit -f`, or a disk quota); "
            "raise it or write to another disk (--results DIR or $NNGK_CACHE) and run the same "
            "command again to resume"
        )
    return f"{where}: {err.strerror}"
