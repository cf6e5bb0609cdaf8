"""`nngk-bench suite`: every core loss on digits, or a paper's strategies (reports/)."""

from __future__ import annotations

from pathlib import Path

import click

from bench.cli.dispatch import dispatch_from, dispatch_options, submit_runs
from bench.cli.options import (
    DEFAULT_RESULTS,
    LOG,
    NON_NEGATIVE,
    POSITIVE,
    VAL_FRACTION,
    parse_ints,
)
from bench.data.splits import VAL_SPLITS
from bench.train.choices import PRESET_NAMES

# The seven core losses, triplet with each miner: the suite that CI and reports/ run.
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


@click.command()
@click.option(
    "--dataset",
    default="glyphs",
    show_default=True,
    help="A built-in set: glyphs (or glyphs:classes=N,...) or digits.",
)
@click.option("--dims", default=None, help="Default: 64,512 (seed003: 64, GAP its own size).")
@click.option("--seed", default="0,1,2", show_default=True)
@click.option("--epochs", type=POSITIVE, default=None, help="Default: the data set's preset.")
@click.option(
    "--preset",
    type=click.Choice(PRESET_NAMES),
    default=None,
    help="seed003: its four selection strategies with FC and GAP embeddings (Table 1).",
)
@click.option("--val-split", type=click.Choice(VAL_SPLITS), default=None)
@VAL_FRACTION
@click.option(
    "--backbone",
    type=click.Choice(["small_cnn", "small_cnn_gn"]),
    default=None,
    help="Default: the data set's preset (small_cnn).",
)
@click.option("--lr", type=NON_NEGATIVE, default=None, help="Default: the data set's preset.")
@click.option(
    "--results", type=click.Path(path_type=Path), default=DEFAULT_RESULTS, show_default=True
)
@LOG
@dispatch_options
def suite(
    dataset, dims, seed, epochs, preset, val_split, val_fraction, backbone, lr, results, log, **jobs
):
    """The seven core losses (triplet with each miner) on glyphs or digits: the comparison in
    reports/. With --preset seed003, seed 003's strategies with FC and GAP embeddings instead."""
    from bench.data.datasets import check_dataset
    from bench.data.glyphs import is_glyphs
    from bench.train.presets import make_configs

    if dataset != "digits" and not is_glyphs(dataset):
        raise click.ClickException(f"suite runs on glyphs or digits; got {dataset!r}")
    try:
        check_dataset(dataset)
    except ValueError as err:
        raise click.ClickException(str(err)) from None
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
            dataset,
            loss,
            None if embedding == "gap" else parse_ints(dims, "--dims"),
            params,
            preset=preset or "",
            seed=s,
            epochs=epochs,
            embedding=embedding,
            val_split=val_split,
            val_fraction=val_fraction,
            backbone=backbone,
            lr=lr,
            log=log,
        )
    ]
    submit_runs(configs, results, dispatch_from(jobs))
