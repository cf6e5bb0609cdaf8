"""What the commands share: option types checked by click, the results folder, integer lists."""

from __future__ import annotations

from pathlib import Path

import click

DEFAULT_RESULTS = Path("results")
# Numeric options out of range fail in click, one line and exit 2, before any run folder exists.
POSITIVE = click.IntRange(min=1)
NON_NEGATIVE = click.FloatRange(min=0)
POSITIVE_FLOAT = click.FloatRange(min=0, min_open=True)


def parse_ints(text: str | None, what: str) -> tuple[int, ...] | None:
    """'64,512,1024' -> (64, 512, 1024); a one-line error for anything else."""
    if text is None:
        return None
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        values = ()
    if not values or any(v < 0 for v in values) or (what == "--dims" and 0 in values):
        raise click.ClickException(
            f"bad {what} {text!r}; expected comma-separated positive integers, e.g. 64,512,1024"
        )
    return values
