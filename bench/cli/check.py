"""`nngk-bench check`: the runs' metrics against a stored baseline (the CI regression check)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from bench.cli.options import NON_NEGATIVE, RESULTS, click_errors


@click.command()
@click.option(
    "--baseline",
    type=click.Path(path_type=Path),
    required=True,
    help="CSV of expected metrics (table, method, dims, metric, value).",
)
@RESULTS
@click.option(
    "--tolerance",
    type=NON_NEGATIVE,
    default=0.06,
    show_default=True,
    help="How far below the baseline a mean may fall.",
)
@click.option("--update", is_flag=True, help="Write the baseline from the runs instead.")
def check(baseline, results, tolerance, update):
    """Compare the runs' metrics with a baseline; exit non-zero on a regression."""
    from bench.report.check import regressions, write_baseline

    with click_errors():
        if update:
            means = write_baseline(results, baseline)
            click.echo(f"{baseline}: {len(means)} values from {results}")
            return
        problems, skipped = regressions(results, baseline, tolerance)
    for line in skipped:
        click.echo(f"skipped {line}", err=True)
    for line in problems:
        click.echo(f"regression: {line}", err=True)
    if problems:
        sys.exit(1)
    click.echo(f"no regression against {baseline} (tolerance {tolerance})")
