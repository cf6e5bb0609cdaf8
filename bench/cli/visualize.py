"""`nngk-bench visualize RUN_DIR`: one run's views of how its embedding generalizes."""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.argument("run_dir", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="Folder for the PNGs (default: the run folder).",
)
@click.option(
    "--max-points",
    default=2000,
    show_default=True,
    help="t-SNE on at most this many training and this many test points.",
)
def visualize(run_dir, out, max_points):
    """One run's views of how its embedding generalizes (seed 003): joint t-SNE of training
    and test embeddings, and the same- vs different-class similarity scatter."""
    from bench.report.visualize import visualize_run

    try:
        written = visualize_run(run_dir, out or run_dir, max_points)
    except (ValueError, FileNotFoundError) as err:
        raise click.ClickException(str(err)) from None
    for path in written:
        click.echo(str(path))
