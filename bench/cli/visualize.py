"""`nngk-bench visualize RUN_DIR...`: each run's views of how its embedding generalizes."""

from __future__ import annotations

import json
from pathlib import Path

import click

from bench.cli.options import DEVICE, click_errors
from bench.protocols import VERIFICATION, get_protocol
from bench.runs import store
from bench.runs.config import BASELINE_LOSS
from bench.util.errors import first_line
from bench.util.progress import log


@click.command()
@click.argument(
    "run_dirs",
    nargs=-1,
    required=True,
    type=click.Path(path_type=Path, exists=True, file_okay=False),
)
@click.option(
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Folder for the PNGs (default: each run's folder; with several runs, a folder of "
    "each run's name in it).",
)
@click.option(
    "--max-points",
    type=click.IntRange(min=10),
    default=2000,
    show_default=True,
    help="t-SNE on at most this many training and this many test points.",
)
@click.option(
    "--gallery/--no-gallery",
    default=True,
    show_default=True,
    help="Retrieval galleries: fixed and worst queries with their top-k test images "
    "(pairs protocol: also the hardest false accepts and rejects).",
)
@click.option(
    "--compare",
    type=click.Path(path_type=Path, exists=True, file_okay=False),
    default=None,
    help="Another run of the same data set: both runs' top-k side by side on the same queries; "
    "only this gallery is drawn (visualize the run without --compare for its other figures).",
)
# A gallery is one image of queries x (k + 1) thumbnails: these bounds keep it at most about
# 6,700 x 2,400 pixels (48 MB of pixels, 64 MB drawn); 5,000 queries once took 23 GB.
@click.option(
    "--queries",
    default=10,
    show_default=True,
    type=click.IntRange(1, 50),
    help="Queries per gallery (at most 50).",
)
@click.option(
    "--k",
    default=5,
    show_default=True,
    type=click.IntRange(1, 20),
    help="Retrieved images per query (at most 20).",
)
@DEVICE
def visualize(run_dirs, out, max_points, gallery, compare, queries, k, device):
    """Each run's views of how its embedding generalizes (Liu et al. 2019): joint t-SNE of
    training and test embeddings, the same- vs different-class similarity scatter, and
    retrieval galleries (query images with their nearest test images, framed green or red).
    RUN_DIRS: one run folder or several (a shell pattern may match more than one)."""
    from bench.cli.training import run_compute

    runs = list(dict.fromkeys(run_dirs))
    if compare is not None and not gallery:
        raise click.UsageError("--compare draws a gallery; leave out --no-gallery")
    if compare is not None and len(runs) > 1:
        raise click.UsageError(
            f"--compare sets one run beside another, but {len(runs)} runs were given "
            f"({', '.join(r.name for r in runs)}); name one of them"
        )
    if compare is not None and compare.resolve() == runs[0].resolve():
        raise click.UsageError(f"--compare names the run itself ({compare}); name another run")
    for folder in (*runs, compare):
        check_finished(folder)
    for folder in runs:
        check_trained(folder)
    search = run_compute(device).search  # None: faiss on the CPU
    for run_dir in runs:
        target = (out / run_dir.name if len(runs) > 1 else out) if out else run_dir
        for path in visualize_one(
            run_dir, target, max_points, gallery, compare, queries, k, search
        ):
            click.echo(str(path))


def visualize_one(
    run_dir: Path, out: Path, max_points: int, gallery: bool, compare: Path | None,
    queries: int, k: int, device=None,
) -> list[Path]:  # fmt: skip
    """One run's figures into `out`; a one-line error for what cannot be drawn."""
    log.info(f"visualize {run_dir}: loading its embeddings; the figures go to {out}")
    from bench.report.galleries import check_comparable
    from bench.report.visualize import visualize_run

    with click_errors(ValueError, FileNotFoundError):  # refused before anything is drawn
        if compare is not None:
            check_comparable(run_dir, compare)
        check_drawable(run_dir, out, gallery)
        # --compare asks for the comparison alone; the t-SNE (minutes) is drawn without it
        written = visualize_run(run_dir, out, max_points) if compare is None else []
        if gallery:
            written += galleries_or_note(run_dir, out, compare, queries, k, device)
    return written


def check_drawable(run_dir: Path, out: Path, gallery: bool) -> None:
    """A one-line ValueError where `out` lies in the run's image folder, or its galleries
    would show images other than the run's."""
    from bench.data.sources.folder import check_outside_data
    from bench.report.gallery_images import check_same_data, has_images, run_config

    if not (Path(run_dir) / store.CONFIG).is_file():
        return  # not a run: said by what loads its embeddings
    cfg = run_config(run_dir)
    check_outside_data(out, [cfg.dataset], "--out")
    if gallery and has_images(cfg.dataset):
        try:
            check_same_data(cfg)
        except ValueError as err:  # its other figures need no images
            raise ValueError(f"{first_line(err)}; or draw the rest alone: --no-gallery") from None


def galleries_or_note(
    run_dir: Path, out: Path, compare: Path | None, queries: int, k: int, device=None
) -> list[Path]:
    """The run's retrieval galleries; for a run on feature vectors, a line saying it has no
    images (its other figures are drawn all the same)."""
    from bench.report.galleries import visualize_galleries
    from bench.report.gallery_images import has_images, no_images_error, run_config
    from bench.report.visualize import drawing

    cfg = run_config(run_dir)
    if not has_images(cfg.dataset):
        click.echo(str(no_images_error(cfg.dataset)))
        return []
    names = ["gallery-fixed.png", "gallery-worst.png"]
    names += ["pair-errors.png"] if get_protocol(cfg.protocol).evaluates(VERIFICATION) else []
    names = names if compare is None else [f"gallery-vs-{compare.name}.png"]
    with drawing(", ".join(names), f"{cfg.dataset}'s test images, loaded first"):
        return visualize_galleries(
            run_dir, out, compare, queries, k, device, only_compare=compare is not None
        )


def check_finished(run_dir: Path | None) -> None:
    """A one-line error for an unfinished run (no metrics.json), before anything is loaded:
    its embeddings are saved only once it is trained and tested."""
    if run_dir is None or store.is_finished(run_dir) or not store.is_run(run_dir):
        return  # not a run at all: loading its embeddings says what is missing
    raise click.ClickException(
        f"{run_dir} is an unfinished run (no {store.METRICS}{epochs_trained(run_dir)}): "
        "visualize draws a finished run's tested embeddings; let the run finish, or if it "
        "was stopped, run the command that started it again (it resumes), then visualize it"
    )


def check_trained(run_dir: Path) -> None:
    """A one-line error for a baseline row (raw inputs, an untrained network): it has test
    embeddings only, no training ones to draw; it can be set beside a trained run."""
    try:
        config = json.loads((run_dir / store.CONFIG).read_text())
    except (OSError, ValueError):
        return  # loading its embeddings says what is missing
    if not isinstance(config, dict) or config.get("loss") != BASELINE_LOSS:
        return
    raise click.ClickException(
        f"{run_dir} is a baseline row ({config.get('features', 'untrained')}), not a trained "
        "run: it has no training embeddings to draw; set its retrieval beside a trained run's "
        f"with: nngk-bench visualize TRAINED_RUN --compare {run_dir}"
    )


def epochs_trained(run_dir: Path) -> str:
    """The message's "; N of M epoch(s) trained", from history.csv (a row an epoch) and
    config.json; empty where either cannot be read."""
    try:
        history = run_dir / store.HISTORY
        rows = history.read_text().strip().splitlines() if history.is_file() else []
        total = json.loads((run_dir / store.CONFIG).read_text())["epochs"]
    except (OSError, ValueError, KeyError, TypeError):
        return ""
    return f"; {max(len(rows) - 1, 0)} of {total} epoch(s) trained"
