"""`speed --run-wall`: `run` with the given options, timed against its epochs; its options
checked before any benchmark runs."""

from __future__ import annotations

import shlex
import tempfile
from contextlib import nullcontext
from pathlib import Path

import click

from bench.cli.options import click_errors

RUN_WALL_PER_CLASS = 40  # images a class of --run-wall-images' folder


def run_wall_args(options: str | None, images: int | None) -> list[str] | None:
    """--run-wall's options as `run`'s arguments (None: no such row), parsed by `run` itself
    so that a wrong one is a one-line error before the other rows take their minutes."""
    from bench.cli.run import run

    if options is None:
        if images is not None:
            raise click.ClickException("--run-wall-images needs --run-wall 'RUN OPTIONS' to run")
        return None
    args = shlex.split(options)
    if images is not None and "--dataset" in args:
        raise click.ClickException(
            "--run-wall-images gives --run-wall its data set: leave --dataset out of --run-wall"
        )
    if "--device" in args:
        raise click.ClickException("--run-wall: leave --device out, speed's --device is its")
    try:
        run.make_context("run", list(args))
    except click.ClickException as err:
        raise click.ClickException(f"--run-wall {options!r}: {err.format_message()}") from None
    return args


def run_wall_rows(args: list[str], device: str, images: int | None = None) -> dict:
    """`run ARGS --device DEVICE` in this process, timed against its epochs; with `images`, on
    a folder of that many synthetic JPEGs written first (not timed), its image cache empty."""
    from bench.cli import main
    from bench.speed.run_wall import run_wall_row
    from bench.speed.train_step import cache_in, folder_set

    def invoke(args: list[str]) -> None:
        main(["run", *args, "--device", device], standalone_mode=False)

    args = list(args)
    with tempfile.TemporaryDirectory(prefix="nngk-run-wall-") as tmp:
        if images is not None:
            root = folder_set(Path(tmp) / "data", images, images // RUN_WALL_PER_CLASS)
            args += ["--dataset", f"folder:{root}"]
        cache = cache_in(Path(tmp) / "cache") if images is not None else nullcontext()
        with click_errors(), cache:
            return run_wall_row(invoke, args, Path(tmp) / "results")
