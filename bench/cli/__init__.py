"""The `nngk-bench` command line."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import click

from bench.data.datasets import check_dataset
from bench.data.names import FEATURES_PREFIX
from bench.data.splits import PROTOCOLS, VAL_SPLITS
from bench.models.backbones import BACKBONES, EMBEDDINGS, check_backbone, check_embedding
from bench.runs import store
from bench.train.presets import PRESETS, make_configs

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


def loss_params_from(loss: str, miner, sigma, k, update_interval, margin, fixed_weights) -> dict:
    """The loss parameters given on the command line, checked against what the loss takes."""
    from losses import loss_defaults
    from miners import MINERS

    given = {
        "learn_weights": False if fixed_weights else None,
        "miner": miner,
        "sigma": sigma,
        "k": k,
        "update_interval": update_interval,
        "margin": margin,
    }
    given = {name: value for name, value in given.items() if value is not None}
    defaults = loss_defaults(loss)
    for name in given:
        if name not in defaults:
            option = "--fixed-weights" if name == "learn_weights" else "--" + name.replace("_", "-")
            takes = ", ".join(defaults) or "no parameters"
            raise ValueError(f"loss {loss!r} does not take {option}; it takes: {takes}")
    if "miner" in given:
        MINERS.get_class(given["miner"])
    return given


def check_choices(loss: str, dataset: str, backbone: str | None) -> None:
    """A ValueError naming the valid choices for an unknown loss, data set or backbone."""
    from losses import get_loss_class

    get_loss_class(loss)
    check_dataset(dataset)
    if backbone is not None:
        check_backbone(backbone)


class OneLineErrors(click.Group):
    """A bad option value is one line, "Error: ...", without click's usage preamble."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except click.UsageError as err:
            error = click.ClickException(err.format_message())
            error.exit_code = err.exit_code
            raise error from None


@click.group(cls=OneLineErrors)
def main() -> None:
    """nngk-bench: compare deep metric learning losses with one trainer and one evaluator."""


@main.command()
@click.option("--loss", default="nngk", show_default=True, help="Loss name (see `losses`).")
@click.option(
    "--dataset",
    default="digits",
    show_default=True,
    help="digits, cars196, cub, tinyimagenet, flowers102, leafsnap or folder:PATH.",
)
@click.option("--protocol", type=click.Choice(PROTOCOLS), default="metric", show_default=True)
@click.option(
    "--preset",
    type=click.Choice(sorted(PRESETS)),
    default=None,
    help="A paper's settings in place of the protocol's preset (seed003: Liu et al.).",
)
@click.option(
    "--data-root",
    default=None,
    help="Folder holding the data sets (default: $NNGK_DATA, else ~/data).",
)
@click.option("--dims", default=None, help="Embedding sizes, e.g. 64,512,1024 (one run each).")
@click.option("--miner", default=None, help="Triplet miner (see `losses`).")
@click.option("--epochs", type=POSITIVE, default=None)
@click.option("--batch-size", type=click.IntRange(min=2), default=None)
@click.option("--lr", type=NON_NEGATIVE, default=None)
@click.option("--weight-decay", type=NON_NEGATIVE, default=None)
@click.option("--sigma", type=POSITIVE_FLOAT, default=None, help="NNGK kernel width.")
@click.option("--k", type=POSITIVE, default=None, help="NNGK neighbours per example.")
@click.option(
    "--update-interval", type=POSITIVE, default=None, help="NNGK epochs between refreshes."
)
@click.option("--margin", type=NON_NEGATIVE, default=None, help="Triplet margin.")
@click.option(
    "--triplet-form",
    type=click.Choice(["margin", "nca"]),
    default="margin",
    show_default=True,
    help="nca: seed 003's NCA form (the loss triplet-nca).",
)
@click.option("--backbone", default=None, help=f"One of {', '.join(BACKBONES)}.")
@click.option("--pretrained", default=None, help="imagenet, none, or a state-dict PATH.")
@click.option(
    "--embedding",
    type=click.Choice(EMBEDDINGS),
    default=None,
    help="fc: a linear layer after the backbone; gap: its global average pooling.",
)
@click.option("--resize", type=POSITIVE, default=None, help="Images are resized to this square.")
@click.option("--crop", type=POSITIVE, default=None, help="Random (train) / centre (eval) crop.")
@click.option(
    "--workers",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="DataLoader workers.",
)
@click.option("--fixed-weights", is_flag=True, help="NNGK: centre weights fixed at 1 (Table 5).")
@click.option("--freeze-backbone", is_flag=True, help="Train only what follows the backbone.")
@click.option(
    "--train-per-class",
    type=POSITIVE,
    default=None,
    help="At most N training images per class (Fig. 3).",
)
@click.option(
    "--val-split",
    type=click.Choice(VAL_SPLITS),
    default=None,
    help="Validation: a share of the training images (default), or whole training classes "
    "never trained on (metric protocol).",
)
@click.option("--seed", default="0", show_default=True, help="Seed(s), e.g. 0 or 0,1,2.")
@click.option(
    "--results", type=click.Path(path_type=Path), default=DEFAULT_RESULTS, show_default=True
)
@click.option("--force", is_flag=True, help="Redo finished runs from scratch.")
@click.option("--device", default=None, help="cpu or cuda (default: cuda when available).")
def run(
    loss,
    dataset,
    protocol,
    preset,
    data_root,
    dims,
    miner,
    epochs,
    batch_size,
    lr,
    weight_decay,
    sigma,
    k,
    update_interval,
    margin,
    triplet_form,
    backbone,
    pretrained,
    embedding,
    resize,
    crop,
    workers,
    fixed_weights,
    freeze_backbone,
    train_per_class,
    val_split,
    seed,
    results,
    force,
    device,
):
    """Train and evaluate LOSS on DATASET, one run per embedding size and seed."""
    if triplet_form == "nca":
        if loss != "triplet":
            raise click.ClickException("--triplet-form nca applies to --loss triplet only")
        loss = "triplet-nca"
    try:
        check_choices(loss, dataset, backbone)
        params = loss_params_from(loss, miner, sigma, k, update_interval, margin, fixed_weights)
    except ValueError as err:
        raise click.ClickException(str(err)) from None
    dims_list = parse_ints(dims, "--dims")
    seeds = parse_ints(seed, "--seed")
    import torch

    dev = torch.device(device) if device else None
    overrides = dict(
        epochs=epochs,
        batch_size=batch_size,
        lr=lr,
        weight_decay=weight_decay,
        backbone=backbone,
        pretrained=pretrained,
        embedding=embedding,
        resize=resize,
        crop=crop,
        workers=workers,
        freeze_backbone=freeze_backbone or None,
        train_per_class=train_per_class,
        val_split=val_split,
        data_root=data_root,
    )
    configs = [
        c
        for s in seeds
        for c in make_configs(
            dataset,
            loss,
            dims_list,
            params,
            protocol=protocol,
            preset=preset or "",
            seed=s,
            **overrides,
        )
    ]
    run_all(configs, results, force, dev)


def run_all(configs: list, results: Path, force: bool, device) -> None:
    """The baseline of the first config's data set, then every config; one-line errors."""
    from bench.train.baseline import run_baseline
    from bench.train.trainer import Trainer

    try:
        for cfg in configs:
            check_embedding(cfg.backbone, cfg.embedding, cfg.dims)
        run_baseline(configs[0], results, device)
        for cfg in configs:
            train_one(cfg, results / cfg.run_id(), force, device, Trainer)
    except KeyboardInterrupt:
        click.echo("interrupted; run the same command again to resume", err=True)
        sys.exit(130)
    except (ValueError, FileNotFoundError, RuntimeError) as err:
        raise click.ClickException(str(err).splitlines()[0]) from None


# The seven core losses, triplet with each miner: the digits suite that CI and reports/ run.
SUITE = (
    ("nngk", {}),
    ("softmax", {}),
    ("contrastive", {}),
    ("triplet", {"miner": "semihard"}),
    ("triplet", {"miner": "easy-positive"}),
    ("triplet", {"miner": "all"}),
    ("npair", {}),
    ("lifted", {}),
    ("nca", {}),
)


# Seed 003's selection strategies (NCA-form triplets; N-pair), each with FC and GAP embeddings.
SEED003_SUITE = (
    ("triplet-nca", {"miner": "all"}),
    ("triplet-nca", {"miner": "semihard"}),
    ("triplet-nca", {"miner": "easy-positive"}),
    ("npair", {}),
)


@main.command()
@click.option("--dims", default=None, help="Default: 64,512 (seed003: 64, GAP its own size).")
@click.option("--seed", default="0,1,2", show_default=True)
@click.option("--epochs", type=POSITIVE, default=None, help="Default: the digits preset's.")
@click.option(
    "--preset",
    type=click.Choice(sorted(PRESETS)),
    default=None,
    help="seed003: its four selection strategies with FC and GAP embeddings (Table 1).",
)
@click.option("--val-split", type=click.Choice(VAL_SPLITS), default=None)
@click.option(
    "--backbone",
    type=click.Choice(["small_cnn", "small_cnn_gn"]),
    default=None,
    help="Default: the digits preset's (small_cnn).",
)
@click.option("--lr", type=NON_NEGATIVE, default=None, help="Default: the digits preset's.")
@click.option(
    "--results", type=click.Path(path_type=Path), default=DEFAULT_RESULTS, show_default=True
)
def suite(dims, seed, epochs, preset, val_split, backbone, lr, results):
    """The seven core losses (triplet with each miner) on digits: the comparison in reports/.
    With --preset seed003, seed 003's strategies with FC and GAP embeddings instead."""
    if preset:
        # A GAP embedding has its layer's size: --dims applies to the FC runs only.
        plan = [(loss, p, emb) for loss, p in SEED003_SUITE for emb in ("fc", "gap")]
    else:
        plan = [(loss, p, None) for loss, p in SUITE]
        dims = dims or "64,512"
    configs = [
        c
        for loss, params, embedding in plan
        for s in parse_ints(seed, "--seed")
        for c in make_configs(
            "digits",
            loss,
            None if embedding == "gap" else parse_ints(dims, "--dims"),
            params,
            preset=preset or "",
            seed=s,
            epochs=epochs,
            embedding=embedding,
            val_split=val_split,
            backbone=backbone,
            lr=lr,
        )
    ]
    run_all(configs, results, False, None)


def train_one(cfg, run_dir: Path, force: bool, device, trainer_cls) -> None:
    if store.is_finished(run_dir) and not force:
        click.echo(f"{run_dir}: finished, skipped (--force redoes it)")
        return
    if force and run_dir.exists():
        shutil.rmtree(run_dir)
    metrics = trainer_cls(cfg, run_dir, device).fit()
    summary = "  ".join(f"{key}={metrics[key]:.4f}" for key in ("recall@1", "nmi", "map@r"))
    click.echo(f"{run_dir}: {summary}")


@main.command()
@click.option(
    "--results", type=click.Path(path_type=Path), default=DEFAULT_RESULTS, show_default=True
)
@click.option("--out", type=click.Path(path_type=Path), default=Path("reports"), show_default=True)
def report(results, out):
    """Write comparison tables (markdown, CSV) and plots (PNG) from the finished runs."""
    from bench.report.index import indexed_files, remove_stale
    from bench.report.write import write_report

    previous = indexed_files(out)
    written, problems = write_report(results, out)
    for line in problems:
        click.echo(f"skipped {line}", err=True)
    for path in written:
        click.echo(str(path))
    for path in remove_stale(out, previous, written):
        click.echo(f"removed {path} (an earlier report's, not written now)")


@main.command()
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


@main.command()
@click.option(
    "--baseline",
    type=click.Path(path_type=Path),
    required=True,
    help="CSV of expected metrics (table, method, dims, metric, value).",
)
@click.option(
    "--results", type=click.Path(path_type=Path), default=DEFAULT_RESULTS, show_default=True
)
@click.option(
    "--tolerance",
    default=0.02,
    show_default=True,
    help="How far below the baseline a mean may fall.",
)
@click.option("--update", is_flag=True, help="Write the baseline from the runs instead.")
def check(baseline, results, tolerance, update):
    """Compare the runs' metrics with a baseline; exit non-zero on a regression."""
    from bench.report.check import regressions, write_baseline

    if update:
        means = write_baseline(results, baseline)
        click.echo(f"{baseline}: {len(means)} values from {results}")
        return
    try:
        problems = regressions(results, baseline, tolerance)
    except ValueError as err:
        raise click.ClickException(str(err)) from None
    for line in problems:
        click.echo(f"regression: {line}", err=True)
    if problems:
        sys.exit(1)
    click.echo(f"no regression against {baseline} (tolerance {tolerance})")


@main.command()
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


@main.command(name="losses")
def list_losses():
    """List the losses and miners with their default parameters."""
    from losses import get_loss_class, loss_defaults, loss_names
    from miners import MINERS

    for name in loss_names():
        params = ", ".join(f"{k}={v}" for k, v in loss_defaults(name).items()) or "-"
        doc = (get_loss_class(name).__doc__ or "").strip().splitlines()[0]
        click.echo(f"{name:12s} {params}\n{'':12s} {doc}")
    click.echo("\nminers (triplet --miner):")
    for name, cls in sorted(MINERS.items()):
        doc = (cls.__doc__ or "").strip().splitlines()[0]
        click.echo(f"{name:14s} {doc}")


SEED002_METHODS = "nml,linear-ml,pca,nca,lmnn,no-projection"


@main.command()
@click.option(
    "--backbone", default="vgg16", show_default=True, help=f"One of {', '.join(BACKBONES)}."
)
@click.option(
    "--dataset",
    default="digits",
    show_default=True,
    help="digits, cars196, cub, tinyimagenet, flowers102, leafsnap or folder:PATH.",
)
@click.option(
    "--protocol", type=click.Choice(["metric", "classify"]), default="metric", show_default=True
)
@click.option("--data-root", default=None, help="Default: $NNGK_DATA, else ~/data.")
@click.option(
    "--pretrained",
    default="imagenet",
    show_default=True,
    help="imagenet, none, or a state-dict PATH.",
)
@click.option("--resize", type=int, default=None, help="Default: the protocol's preset.")
@click.option("--crop", type=int, default=None, help="Centre crop; default: the protocol's preset.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seeds pretrained=none.")
@click.option(
    "--out",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Default: results/features/<dataset>-<protocol>-<backbone>-<weights>.npz.",
)
@click.option("--force", is_flag=True, help="Extract again even if the file exists.")
@click.option("--device", default=None, help="cpu or cuda (default: cuda when available).")
def features(
    backbone, dataset, protocol, data_root, pretrained, resize, crop, seed, out, force, device
):
    """Extract features of every image of DATASET once with a frozen BACKBONE (VGG16: FC7
    after ReLU, seed 002) into an .npz (features, labels, split) for `linear --dataset
    features:PATH`."""
    from bench.data.feature_files import write_features
    from bench.train.extract import default_features_path, extract_features

    out = out or default_features_path(dataset, protocol, backbone, pretrained)
    if out.exists() and not force:
        click.echo(f"{out}: exists, skipped (--force extracts again)")
        return
    try:
        check_dataset(dataset)
        check_backbone(backbone)
        if dataset.startswith(FEATURES_PREFIX):
            raise ValueError(f"{dataset} holds features already; give a data set of images")
        import torch

        arrays = extract_features(
            dataset,
            backbone,
            pretrained,
            protocol,
            data_root,
            torch.device(device) if device else None,
            seed,
            resize=resize,
            crop=crop,
        )
    except (ValueError, FileNotFoundError, RuntimeError) as err:
        raise click.ClickException(str(err).splitlines()[0]) from None
    write_features(out, *arrays)
    split = arrays[2]
    counts = ", ".join(f"{s} {int((split == s).sum())}" for s in ("train", "val", "test"))
    click.echo(f"{out}: {arrays[0].shape[1]}-d features of {len(split)} images ({counts})")


@main.command()
@click.option(
    "--method",
    default=SEED002_METHODS,
    show_default=True,
    help="Comma-separated methods of seed 002.",
)
@click.option("--dataset", default="digits", show_default=True, help="digits or features:PATH.npz.")
@click.option(
    "--protocol",
    type=click.Choice(["metric", "classify"]),
    default="metric",
    show_default=True,
    help="digits' split: metric trains on 0-4 and tests on 5-9; classify (seed 002's own "
    "retrieval protocol) uses every class in every split. A features file has its own split.",
)
@click.option("--dims", default="8,16,32,64", show_default=True, help="Projection sizes.")
@click.option("--seed", default="0", show_default=True, help="Seed(s), e.g. 0 or 0,1,2.")
@click.option("--pairs", type=POSITIVE, default=None, help="nml, linear-ml: training pairs.")
@click.option(
    "--iterations",
    type=POSITIVE,
    default=None,
    help="nml, linear-ml: SGD iterations (pairs visited).",
)
@click.option(
    "--lr",
    type=POSITIVE_FLOAT,
    default=None,
    help="nml, linear-ml: learning rate.",
)
@click.option(
    "--results", type=click.Path(path_type=Path), default=DEFAULT_RESULTS, show_default=True
)
@click.option("--force", is_flag=True, help="Redo finished runs.")
def linear(method, dataset, protocol, dims, seed, pairs, iterations, lr, results, force):
    """Seed 002's NML and linear baselines on feature vectors: one run per method, size and
    seed, evaluated with mprec@K (K = 1..50) and the common metrics."""
    from bench.classic.methods import linear_runs, run_linear_method
    from bench.data.features import load_features

    given = {"pairs": pairs, "iterations": iterations, "lr": lr}
    try:
        plan = linear_runs(
            method.split(","), parse_ints(dims, "--dims"), parse_ints(seed, "--seed"), given
        )
        feats = load_features(dataset, protocol=protocol)
        too_big = [d for name, d, _, _ in plan if name != "no-projection" and d > feats.dims]
        if too_big:
            raise ValueError(f"--dims {max(too_big)} exceeds the {feats.dims} feature dimensions")
        # The untrained baseline row of the report's table: the raw test features.
        from bench.train.baseline import run_baseline

        split = protocol if dataset == "digits" else "metric"
        run_baseline(make_configs(dataset, "untrained", None, {}, protocol=split)[0], results)
        for name, d, s, params in plan:
            run_dir = run_linear_method(
                name, dataset, d, s, params, results, force, protocol, feats
            )
            metrics = store.read_metrics(run_dir)
            shown = "  ".join(
                f"{k}={metrics[k]:.4f}"
                for k in ("mprec@1", "mprec@10", "map@r")
                if metrics[k] is not None
            )
            click.echo(f"{run_dir}: {shown}")
    except (ValueError, FileNotFoundError) as err:
        raise click.ClickException(str(err).splitlines()[0]) from None


if __name__ == "__main__":
    main()
