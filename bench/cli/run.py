"""`nngk-bench run`: train and evaluate a loss on a data set, a run per embedding size and seed."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from bench.cli.dispatch import dispatch_from, dispatch_options, submit_runs
from bench.cli.options import (
    DEFAULT_RESULTS,
    LOG,
    NON_NEGATIVE,
    POSITIVE,
    POSITIVE_FLOAT,
    VAL_FRACTION,
    parse_ints,
)
from bench.cli.training import checked_device, checked_runs
from bench.data.splits import PROTOCOLS, VAL_SPLITS
from bench.models.choices import BACKBONES, EMBEDDINGS, check_backbone
from bench.train.choices import PRESET_NAMES


def loss_params_from(loss: str, fixed_weights: bool = False, **options) -> dict:
    """The loss parameters given on the command line (`options`: miner, sigma, k, ...; None
    where not given), checked against what the loss takes."""
    from losses import loss_defaults
    from miners import MINERS

    given = {"learn_weights": False if fixed_weights else None, **options}
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
    from bench.data.datasets import check_dataset
    from losses import get_loss_class

    get_loss_class(loss)
    check_dataset(dataset)
    if backbone is not None:
        check_backbone(backbone)


@click.command()
@click.option("--loss", default="nngk", show_default=True, help="Loss name (see `losses`).")
@click.option(
    "--dataset",
    default="glyphs",
    show_default=True,
    help="glyphs[:classes=N,...], digits, cars196, cub, tinyimagenet, flowers102, leafsnap, "
    "folder:PATH (one sub-folder per class) or features:PATH.npz. A folder gets the metric "
    "preset (GoogLeNet with ImageNet weights, 256/224 px); offline, without those weights in "
    "torch's cache, add e.g. --backbone small_cnn --pretrained none --resize 64 --crop 56.",
)
@click.option("--protocol", type=click.Choice(PROTOCOLS), default="metric", show_default=True)
@click.option(
    "--preset",
    type=click.Choice(PRESET_NAMES),
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
@click.option(
    "--m-per-class",
    type=click.IntRange(min=1),
    default=None,
    help="Examples of each class in a class-balanced batch (default: what the loss declares, "
    "else the preset's).",
)
@click.option("--lr", type=NON_NEGATIVE, default=None)
@click.option("--weight-decay", type=NON_NEGATIVE, default=None)
@click.option("--sigma", type=POSITIVE_FLOAT, default=None, help="NNGK kernel width.")
@click.option("--k", type=POSITIVE, default=None, help="NNGK neighbours per example.")
@click.option(
    "--update-interval", type=POSITIVE, default=None, help="NNGK epochs between refreshes."
)
@click.option(
    "--index",
    type=click.Choice(["auto", "exact", "ivf"]),
    default=None,
    help="NNGK neighbour search at refresh: exact, approximate (IVF, its recall logged), or "
    "auto (IVF from 100,000 training items). Default: auto.",
)
@click.option("--nprobe", type=POSITIVE, default=None, help="NNGK IVF lists probed (default 16).")
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
@click.option(
    "--resize",
    type=POSITIVE,
    default=None,
    help="Images' size (the shorter side; the longer at most 4x it) before crops.",
)
@click.option("--crop", type=POSITIVE, default=None, help="Random (train) / centre (eval) crop.")
@click.option(
    "--crop-mode",
    type=click.Choice(["squash", "aspect"]),
    default=None,
    help="squash (the papers'): images stretched to resize x resize, random crops; aspect: "
    "aspect ratio kept, random-resized crops. Default: squash.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="DataLoader workers.",
)
@LOG
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
@VAL_FRACTION
@click.option("--seed", default="0", show_default=True, help="Seed(s), e.g. 0 or 0,1,2.")
@click.option(
    "--results", type=click.Path(path_type=Path), default=DEFAULT_RESULTS, show_default=True
)
@click.option("--force", is_flag=True, help="Redo finished runs from scratch.")
@click.option("--device", default=None, help="cpu or cuda (default: cuda when available).")
@click.option(
    "--nproc",
    type=POSITIVE,
    default=1,
    show_default=True,
    help="Processes training each run together (DistributedDataParallel through torchrun; "
    "one GPU each on a GPU machine).",
)
@dispatch_options
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
    m_per_class,
    lr,
    weight_decay,
    sigma,
    k,
    update_interval,
    index,
    nprobe,
    margin,
    triplet_form,
    backbone,
    pretrained,
    embedding,
    resize,
    crop,
    crop_mode,
    workers,
    log,
    fixed_weights,
    freeze_backbone,
    train_per_class,
    val_split,
    val_fraction,
    seed,
    results,
    force,
    device,
    nproc,
    **jobs,
):
    """Train and evaluate LOSS on DATASET, one run per embedding size and seed."""
    if triplet_form == "nca":
        if loss != "triplet":
            raise click.ClickException("--triplet-form nca applies to --loss triplet only")
        loss = "triplet-nca"
    try:
        check_choices(loss, dataset, backbone)
        params = loss_params_from(
            loss,
            fixed_weights,
            miner=miner,
            sigma=sigma,
            k=k,
            update_interval=update_interval,
            margin=margin,
            index=index,
            nprobe=nprobe,
        )
    except ValueError as err:
        raise click.ClickException(str(err)) from None
    dims_list = parse_ints(dims, "--dims")
    seeds = parse_ints(seed, "--seed")
    dispatch = dispatch_from(jobs)
    if dispatch.executor == "none":
        checked_device(device)  # before anything is written
    overrides = dict(
        epochs=epochs,
        batch_size=batch_size,
        m_per_class=m_per_class,
        lr=lr,
        weight_decay=weight_decay,
        backbone=backbone,
        pretrained=pretrained,
        embedding=embedding,
        resize=resize,
        crop=crop,
        crop_mode=crop_mode,
        workers=workers,
        log=log,
        freeze_backbone=freeze_backbone or None,
        train_per_class=train_per_class,
        val_split=val_split,
        val_fraction=val_fraction,
        data_root=data_root,
    )
    configs = [
        c
        for s in seeds
        for c in checked_configs(
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
    if nproc > 1 and "WORLD_SIZE" not in os.environ:
        check_before_torchrun(configs, nproc)
        relaunch_with_torchrun(nproc)
    submit_runs(configs, results, dispatch, force, device)


def checked_configs(dataset: str, loss: str, dims, params: dict, **settings) -> list:
    """`make_configs`, with a one-line error for settings that do not go together."""
    from bench.train.presets import make_configs

    try:
        return make_configs(dataset, loss, dims, params, **settings)
    except ValueError as err:
        raise click.ClickException(str(err)) from None


def check_before_torchrun(configs: list, nproc: int) -> None:
    """Every run checked for `nproc` processes (a batch they can share, its data's splits)
    here, so that a fault is one line rather than one per process and torchrun's report."""
    try:
        checked_runs(configs, nproc)
    except (ValueError, RuntimeError) as err:
        raise click.ClickException(str(err).splitlines()[0]) from None


def relaunch_with_torchrun(nproc: int) -> None:
    """This command again, without --nproc, as `nproc` processes under torchrun (one machine)."""
    import subprocess

    args, skip = [], False
    for arg in sys.argv[1:]:
        if skip or arg.startswith("--nproc="):
            skip = False
            continue
        skip = arg == "--nproc"
        if not skip:
            args.append(arg)
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command = [*launcher, f"--nproc_per_node={nproc}", "-m", "bench.cli", *args]
    sys.exit(subprocess.run(command).returncode)
