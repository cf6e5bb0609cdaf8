"""`nngk-bench report`: the comparison tables and plots from the finished runs."""

from __future__ import annotations

from pathlib import Path

import click

from bench.cli.options import DEFAULT_RESULTS


@click.command()
@click.option(
    "--results", type=click.Path(path_type=Path), default=DEFAULT_RESULTS, show_default=True
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=DEFAULT_RESULTS / "report",
    show_default=True,
    help="Folder of the report; it overwrites and removes only files a report wrote there.",
)
@click.option(
    "--reference",
    default=None,
    help="The row every other row is tested against, e.g. nngk (default: each column's best).",
)
def report(results, out, reference):
    """Write comparison tables (markdown, CSV) and plots (PNG) from the finished runs."""
    from bench.report.manifest import read_manifest, remove_stale
    from bench.report.write import write_report

    previous = read_manifest(out)
    written, problems = write_report(results, out, reference)
    for line in problems:
        click.echo(f"skipped {line}", err=True)
    for path in written:
        click.echo(str(path))
    for path in remove_stale(out, previous, written):
        click.echo(f"removed {path} (an earlier report's, not written now)")
