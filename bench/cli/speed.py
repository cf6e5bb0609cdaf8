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
@click.option(
    "--eval-sizes", default="10000,50000", show_default=True, help="Items of the evaluator runs."
)
@click.option(
    "--refresh-images",
    default=3000,
    show_default=True,
    type=click.IntRange(2),
    help="Glyphs of the NNGK refresh benchmark.",
)
@click.option(
    "--ann-size",
    default=50_000,
    show_default=True,
    type=click.IntRange(2),
    help="Bank of the approximate (IVF) vs exact search benchmark (e.g. 1000000 on a GPU).",
)
@click.option("--device", default="cpu", show_default=True, help="cpu or cuda.")
@click.option("--threads", default=None, type=int, help="CPU threads (default: every core).")
def speed(
    batch, loader_dataset, data_root, resize, crop, backbone, images, workers, eval_sizes,
    refresh_images, ann_size, device, threads,
):  # fmt: skip
    """Benchmarks printed as ratios: the NNGK step against a per-example loop and a softmax
    step, the NNGK refresh against an inference pass, approximate (IVF) against exact bank
    search, our lifted structure loss against PML's; with --loader, the input pipeline (cache,
    crops on the device) against decoding every epoch, both against the model's training."""
    import os
    import tempfile

    import torch

    from bench.cli.options import parse_ints
    from bench.speed.benchmarks import evaluator_benchmark, lifted_benchmark
    from bench.speed.loader import loader_benchmark
    from bench.speed.nngk_step import nngk_step_benchmark
    from bench.speed.refresh import ann_benchmark, refresh_benchmark

    torch.set_num_threads(threads or os.cpu_count() or 1)
    click.echo(
        f"device {device}, {torch.get_num_threads()} CPU threads, torch {torch.__version__}, "
        f"{faiss_text()}"
    )
    show("NNGK step (forward + backward)", nngk_step_benchmark(batch=batch, device=device))
    refresh = refresh_benchmark(refresh_images, device=device)
    show("NNGK refresh vs one inference pass (untrained network)", refresh)
    show(f"approximate (IVF) vs exact bank search ({faiss_text()})", ann_benchmark(ann_size))
    show("lifted structure: PML / ours", lifted_benchmark(batch=batch))
    sizes = parse_ints(eval_sizes, "--eval-sizes")
    show("evaluator (R@1, MAP@R, NMI): PML / ours", evaluator_benchmark(sizes))
    show("command-line start (a fresh process, seconds)", start_times())
    if loader_dataset is None:
        return
    tmp = Path(tempfile.mkdtemp(prefix="nngk-speed-"))
    try:
        paths = loader_paths(loader_dataset, data_root, images, tmp)
        cache = tmp / "cache"
        result = loader_benchmark(paths, resize, crop, backbone, cache, workers, device, batch)
        show("loader", [{"loader": k, "value": v} for k, v in result.items()])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def show(title: str, rows: list[dict]) -> None:
    from tabulate import tabulate

    click.echo(f"\n{title}\n" + tabulate(rows, headers="keys", floatfmt=".4g", tablefmt="github"))


def faiss_text() -> str:
    import faiss

    from bench.util.knn import uses_gpu

    return f"faiss {faiss.__version__} on the {'GPU' if uses_gpu() else 'CPU'}"


def loader_paths(dataset: str, data_root: str | None, images: int, tmp: Path) -> list[str]:
    """`images` image files: synthetic JPEGs, or the first of a data set's table."""
    from bench.speed.loader import synthetic_jpegs

    if dataset == "synthetic":
        return synthetic_jpegs(tmp / "jpegs", count=images)
    from bench.data.datasets import default_data_root, read_table

    try:
        frame, _ = read_table(dataset, data_root or default_data_root())
    except ValueError as err:
        raise click.ClickException(str(err)) from None
    return frame["path"].tolist()[:images]


def start_times() -> list[dict]:
    """Wall seconds of `nngk-bench --help` and `nngk-bench losses` in a new interpreter."""
    import subprocess
    import sys
    import time

    rows = []
    for args in (["--help"], ["losses"]):
        start = time.perf_counter()
        command = [sys.executable, "-c", "from bench.cli import main; main()", *args]
        subprocess.run(command, check=True, capture_output=True)
        rows.append(
            {"command": "nngk-bench " + " ".join(args), "seconds": time.perf_counter() - start}
        )
    return rows
