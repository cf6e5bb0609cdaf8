"""`nngk-bench speed`: benchmarks printed as ratios."""

from __future__ import annotations

import shutil
from pathlib import Path

import click


@click.command()
@click.option("--batch", default=128, show_default=True, help="Batch of the loss benchmark.")
@click.option(
    "--loader",
    "loader_dataset",
    default=None,
    help="Also benchmark image loading: a data set name, or 'synthetic'.",
)
@click.option("--data-root", default=None)
@click.option("--resize", default=256, show_default=True)
@click.option("--crop", default=224, show_default=True)
@click.option("--backbone", default="resnet18", show_default=True)
@click.option("--images", default=640, show_default=True, help="Images to time the loader on.")
@click.option("--workers", default=0, show_default=True, help="Loader processes (as in run).")
def speed(batch, loader_dataset, data_root, resize, crop, backbone, images, workers):
    """Benchmarks printed as ratios: our lifted structure loss against PML's; with --loader, the
    image cache against decoding every epoch, both against the model's training speed."""
    import tempfile

    from tabulate import tabulate

    from bench.speed.benchmarks import lifted_benchmark, loader_benchmark, synthetic_jpegs

    rows = lifted_benchmark(batch=batch)
    click.echo(tabulate(rows, headers="keys", floatfmt=".4f", tablefmt="github"))
    if loader_dataset is None:
        return
    tmp = Path(tempfile.mkdtemp(prefix="nngk-speed-"))
    if loader_dataset == "synthetic":
        paths = synthetic_jpegs(tmp / "jpegs", count=images)
    else:
        from bench.data.datasets import default_data_root, read_table

        try:
            table, _ = read_table(loader_dataset, data_root or default_data_root())
        except ValueError as err:
            raise click.ClickException(str(err)) from None
        paths = table["path"].tolist()[:images]
    result = loader_benchmark(paths, resize, crop, backbone, tmp / "cache", workers)
    click.echo(
        tabulate(result.items(), headers=["loader", "value"], floatfmt=".2f", tablefmt="github")
    )
    shutil.rmtree(tmp, ignore_errors=True)
