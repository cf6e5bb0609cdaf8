"""`nngk-bench speed`: benchmarks printed as ratios."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click

from bench.cli.options import NON_NEGATIVE, click_errors
from bench.cli.run_wall import RUN_WALL_PER_CLASS

BENCHMARKS = (
    "nngk-step",
    "refresh",
    "ann",
    "lifted",
    "evaluator",
    "evaluator-scale",
    "crossover",
    "device-search",
    "device-kmeans",
    "device-health",
    "search-parts",
    "report",
    "start",
)
MIN_SCALE_ITEMS = 20  # a class of 10 % holds 2 items or more
MAX_BATCH = 5000  # bench.speed.nngk_step's bank: a batch is drawn from its items


def int_option(name: str, default: int, least: int, text: str | None = None) -> Callable:
    """An integer option of `least` or more, its `default` shown."""
    return click.option(
        name, default=default, show_default=True, type=click.IntRange(least), help=text
    )


@click.command()
@click.option(
    "--batch",
    type=click.IntRange(min=2, max=MAX_BATCH),
    default=128,
    show_default=True,
    help=f"Batch of the loss benchmark (at most {MAX_BATCH}, the items of NNGK's bank there).",
)
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
@click.option(
    "--images",
    type=int,
    help="Images to time the loader on (default: the 10 batches or so it reads, in whole "
    "rounds of --workers after the first).",
)
@click.option("--workers", default=0, show_default=True, help="Loader processes (as in run).")
@click.option(
    "--eval-sizes", default="10000,50000", show_default=True, help="Items of the evaluator runs."
)
@int_option("--refresh-images", 3000, 2, "Glyphs of the NNGK refresh benchmark.")
@int_option(
    "--ann-size",
    50_000,
    2,
    "Bank of the approximate (IVF) vs exact search benchmark (e.g. 1000000 on a GPU).",
)
@click.option(
    "--scale-sizes",
    default="2000",
    show_default=True,
    help="Items of the evaluator-at-scale rows (128-d, one class holding 10 %), e.g. "
    "100000,1000000.",
)
@click.option(
    "--scale-memory",
    default=8.0,
    show_default=True,
    type=NON_NEGATIVE,
    help="GB each evaluator-at-scale process may add to its data (0: no cap).",
)
@int_option("--scale-timeout", 3600, 1, "Seconds each evaluator-at-scale process may take.")
@int_option(
    "--crossover-items",
    2000,
    2,
    "Items of the large-class ranking vs faiss top-k rows (e.g. 100000).",
)
@int_option(
    "--report-runs",
    1000,
    3,
    "Generated run folders `report` is timed over, against reading their metrics.json.",
)
@click.option(
    "--only",
    default=None,
    help=f"Only these benchmarks, comma-separated: {', '.join(BENCHMARKS)} "
    "(--loader adds the loader's).",
)
@click.option(
    "--train-step",
    default=None,
    help="Also time the harness's training step (NNGK, --resize/--crop, synthetic JPEGs) "
    "against a bare loop: BACKBONE:BATCH pairs, e.g. googlenet:20,resnet50:128.",
)
@click.option(
    "--precisions",
    default="fp32,bf16",
    show_default=True,
    help="Precisions of the --train-step rows.",
)
@int_option("--train-steps", 20, 2)
@click.option(
    "--run-wall",
    default=None,
    metavar="'RUN OPTIONS'",
    help="Also time `run` with these options (e.g. '--dataset glyphs --epochs 30'; --device is "
    "this command's) against the sum of its epochs, in a temporary folder.",
)
@click.option(
    "--run-wall-images",
    default=None,
    type=click.IntRange(2 * RUN_WALL_PER_CLASS),
    help="Run --run-wall on this many synthetic 500 x 375 JPEGs, 40 a class (issue 44's "
    "CUB-200-2011 layout: 8000), written with an empty image cache in its temporary folder.",
)
@click.option("--device", default="cpu", show_default=True, help="cpu or cuda.")
@click.option(
    "--threads",
    default=None,
    type=click.IntRange(1),
    help="CPU threads (default: every core the process may use).",
)
def speed(
    batch, loader_dataset, data_root, resize, crop, backbone, images, workers, eval_sizes,
    refresh_images, ann_size, scale_sizes, scale_memory, scale_timeout, crossover_items,
    report_runs, only, train_step, precisions, train_steps, run_wall, run_wall_images, device,
    threads,
):  # fmt: skip
    """Benchmarks printed as ratios: the NNGK step against a per-example loop and a softmax
    step, the NNGK refresh against an inference pass, approximate (IVF) against exact bank
    search, our lifted structure loss against PML's, the evaluator against PML's and against
    the bare faiss search (with peak memory), ExactRanking against faiss's top-k, `report`
    over --report-runs generated runs against reading their metrics.json; with
    --loader, the input pipeline (cache, crops on the device) against decoding every epoch,
    both against the model's training."""
    import tempfile

    from bench.cli.options import parse_ints
    from bench.cli.run_wall import run_wall_args, run_wall_rows
    from bench.cli.training import checked_device
    from bench.speed.loader import CACHED_BATCHES, batches_needed, batches_read

    checked_device(device)  # a one-line error for a device torch does not know, or lacks
    chosen = chosen_benchmarks(only)
    wall_args = run_wall_args(run_wall, run_wall_images)
    step_plan, step_precisions = train_step_plan(train_step, precisions)
    sizes = parse_ints(eval_sizes, "--eval-sizes")
    scale = parse_ints(scale_sizes, "--scale-sizes")
    if min(scale) < MIN_SCALE_ITEMS:
        raise click.ClickException(
            f"--scale-sizes {scale_sizes!r}: each size needs at least {MIN_SCALE_ITEMS} items"
        )
    if images is None:
        images = batch * batches_read(CACHED_BATCHES, workers)
    if loader_dataset is not None and images < batches_needed(workers) * batch:
        raise click.ClickException(
            f"--images {images} is less than {batches_needed(workers)} batches of --batch "
            f"{batch}: a loader's rate is taken after its first batch, over a round of its "
            f"{max(workers, 1)} worker(s); give more images or a smaller batch"
        )

    import torch

    from bench.data.cache_times import usable_cpus
    from bench.report.runs import load_runs
    from bench.report.write import write_report
    from bench.speed import device_search
    from bench.speed.benchmarks import evaluator_benchmark, lifted_benchmark
    from bench.speed.loader import loader_benchmark
    from bench.speed.nngk_step import nngk_step_benchmark
    from bench.speed.refresh import ann_benchmark, refresh_benchmark
    from bench.speed.report_runs import report_benchmark
    from bench.speed.scale import crossover_benchmark, scale_benchmark

    # Its affinity, not os.cpu_count(): in a container or a job's share of a machine, all of
    # the machine's cores would oversubscribe the process's.
    torch.set_num_threads(threads or usable_cpus())
    click.echo(
        f"device {device}, {torch.get_num_threads()} CPU threads, torch {torch.__version__}, "
        f"{faiss_text()}"
    )
    allowance = scale_memory or None
    runs = {
        "nngk-step": lambda: show(
            "NNGK step (forward + backward)", nngk_step_benchmark(batch=batch, device=device)
        ),
        "refresh": lambda: show(
            "NNGK refresh vs one inference pass (untrained network)",
            refresh_benchmark(refresh_images, device=device),
        ),
        "ann": lambda: show(
            f"approximate (IVF) vs exact bank search ({faiss_text()})", ann_benchmark(ann_size)
        ),
        "lifted": lambda: show("lifted structure: PML / ours", lifted_benchmark(batch=batch)),
        "evaluator": lambda: show(
            "evaluator (R@1, MAP@R, NMI): PML / ours", evaluator_benchmark(sizes)
        ),
        "evaluator-scale": lambda: show(
            "evaluator at scale (R@K and MAP@R; each in a process of its own: seconds, peak "
            "resident memory, (+ its rise above the data))",
            scale_benchmark(scale, allowance_gb=allowance, timeout=scale_timeout, say=progress),
        ),
        "crossover": lambda: show(
            "large-class ranking vs faiss top-k (ms per query, 128-d)",
            crossover_benchmark(crossover_items),
        ),
        "report": lambda: show(
            "report over generated runs vs reading their metrics.json (seconds)",
            report_benchmark(write_report, load_runs, count=report_runs),
        ),
        "start": lambda: show("command-line start (a fresh process, seconds)", start_times()),
    }
    for name, (title, benchmark) in device_search.BENCHMARKS.items():
        runs[name] = lambda title=title, run=benchmark: show(title % device, run(scale, device))
    for name in chosen:
        runs[name]()
    if step_plan:
        train_step_rows(step_plan, step_precisions, train_steps, device, resize, crop, workers)
    if wall_args is not None:
        row = run_wall_rows(wall_args, device, run_wall_images)
        phases = row.pop("phases")
        show("a run's wall time vs the sum of its epochs (seconds)", [row])
        if phases:
            show("where its seconds before and after its epochs went, by its log", phases)
    if loader_dataset is None:
        return
    with tempfile.TemporaryDirectory(prefix="nngk-speed-", ignore_cleanup_errors=True) as tmp:
        paths = loader_paths(loader_dataset, data_root, images, Path(tmp))
        cache = Path(tmp) / "cache"
        result = loader_benchmark(paths, resize, crop, backbone, cache, workers, device, batch)
        show("loader", [{"loader": k, "value": v} for k, v in result.items()])


def train_step_plan(pairs: str | None, precisions: str) -> tuple[list, list[str]]:
    """(--train-step's (backbone, batch) pairs, --precisions), checked before anything runs."""
    from bench.train.choices import PRECISIONS

    wanted = [p.strip() for p in precisions.split(",") if p.strip()]
    if not wanted or set(wanted) - set(PRECISIONS):
        raise click.ClickException(f"--precisions {precisions!r}: some of {', '.join(PRECISIONS)}")
    plan = []
    for pair in pairs.split(",") if pairs else []:
        backbone, _, batch = pair.strip().partition(":")
        if not batch.isdigit() or int(batch) < 2:
            raise click.ClickException(f"--train-step {pair!r}: expected BACKBONE:BATCH")
        plan.append((backbone, int(batch)))
    return plan, wanted


def train_step_rows(
    plan: list, precisions: list[str], steps: int, device: str, resize: int, crop: int,
    workers: int,
) -> None:  # fmt: skip
    """The --train-step rows: each (backbone, batch) at each precision, in a temporary folder;
    the harness's batches loaded by `workers` processes, as `run --workers` loads them."""
    import tempfile

    from bench.speed.train_step import train_step_benchmark
    from bench.train.step_rates import step_rates

    for backbone, batch in plan:
        with tempfile.TemporaryDirectory(prefix="nngk-step-", ignore_cleanup_errors=True) as tmp:
            rows = train_step_benchmark(
                step_rates, backbone, batch, precisions, device, steps, Path(tmp), resize, crop,
                workers,
            )  # fmt: skip
        title = f"training step: the harness's epoch vs a bare loop ({backbone}, batch {batch}"
        show(f"{title}, {workers} loader workers)", rows)


def chosen_benchmarks(only: str | None) -> list[str]:
    """The benchmarks of --only (all of them without it), in the order they run; a name that is
    none of them is a one-line error naming them."""
    if only is None:
        return list(BENCHMARKS)
    names = [name.strip() for name in only.split(",") if name.strip()]
    unknown = [name for name in names if name not in BENCHMARKS]
    if unknown or not names:
        raise click.ClickException(
            f"--only {only!r}: expected some of {', '.join(BENCHMARKS)}, comma-separated"
        )
    return [name for name in BENCHMARKS if name in names]


def progress(line: str) -> None:
    """A progress line of a long benchmark, on stderr (the tables stay on stdout)."""
    click.echo(line, err=True)


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

    with click_errors():
        frame, _ = read_table(dataset, data_root or default_data_root())
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
