"""`nngk-bench suite`: every core loss on digits, or a paper's strategies (reports/)."""

from __future__ import annotations

import click

from bench.cli.dispatch import dispatch_from, dispatch_options, submit_runs
from bench.cli.options import DEVICE, FORCE, RESULTS, dims_option, seed_option
from bench.cli.params import loss_param_option, name_values, params_for_each
from bench.cli.settings import PresetChoice, setting_options, settings_from

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
# The losses Musgrave et al. 2020 (A Metric Learning Reality Check) compared, as named here.
REALITY_CHECK = (
    ("contrastive", {}),
    ("triplet", {"miner": "semihard"}),
    ("ntxent", {}),
    ("proxy-nca", {}),
    ("margin", {}),
    ("margin-class-beta", {}),
    ("normalized-softmax", {}),
    ("cosface", {}),
    ("arcface", {}),
    ("fastap", {}),
    ("snr", {}),
    ("multi-similarity", {}),
    ("multi-similarity-miner", {}),
    ("soft-triple", {}),
)
LOSS_SETS = ("paper", "realitycheck", "all")

# Liu et al. 2019's selection strategies (NCA-form triplets; N-pair), each with FC and GAP
# embeddings.
LIU2019_SUITE = (
    ("triplet-nca", {"miner": "all"}),
    ("triplet-nca", {"miner": "semihard"}),
    ("triplet-nca", {"miner": "easy-positive"}),
    ("npair", {}),
)


# The run settings the suite takes as `run` does (its own --preset and --backbone: they choose
# among the suite's plans and small networks).
SUITE_SETTINGS = (
    "epochs",
    "batch_size",
    "m_per_class",
    "optimizer",
    "lr",
    "weight_decay",
    "val_split",
    "val_fraction",
    "pretrained",
    "train_per_class",
    "clustering",
    "workers",
    "log",
)


@click.command()
@click.option(
    "--dataset",
    default="glyphs",
    show_default=True,
    help="A built-in set: glyphs (or glyphs:classes=N,...) or digits.",
)
@dims_option("Default: 64,512 (liu2019: 64, GAP its own size).")
@seed_option("0,1,2")
@click.option(
    "--preset",
    type=PresetChoice(),
    default=None,
    help="liu2019: Liu et al. 2019's four selection strategies with FC and GAP embeddings "
    "(Table 1).",
)
@click.option(
    "--losses",
    "loss_set",
    default="paper",
    show_default=True,
    help="paper: NNGK and the losses of the source papers, triplet with each miner; "
    "realitycheck: the fourteen of Musgrave et al. 2020; all: both and every other loss; or "
    "a comma-separated list of losses (`nngk-bench losses`), each at its defaults.",
)
@click.option(
    "--backbone",
    type=click.Choice(["small_cnn", "small_cnn_gn"]),
    default=None,
    help="Default: the data set's preset (small_cnn).",
)
@setting_options(*SUITE_SETTINGS)
@loss_param_option(
    "A loss parameter for every loss of the suite that takes it, e.g. sigma=2.0 (NNGK) or "
    "margin=0.1 (triplet); repeatable. The triplet miners are the suite's own."
)
@RESULTS
@FORCE
@DEVICE
@dispatch_options
def suite(
    dataset, dims, seeds, preset, loss_set, backbone, loss_param, results, force, device, **options
):
    """The seven core losses (triplet with each miner) on glyphs or digits: the comparison in
    reports/. With --preset liu2019, Liu et al. 2019's strategies with FC and GAP embeddings
    instead."""
    from bench.data.datasets import check_dataset
    from bench.data.glyphs import is_glyphs
    from bench.train.presets import make_configs

    dispatch = dispatch_from(options)
    settings = settings_from(options, SUITE_SETTINGS)
    if dataset != "digits" and not is_glyphs(dataset):
        raise click.ClickException(f"suite runs on glyphs or digits; got {dataset!r}")
    try:
        if preset:
            if loss_set != "paper":
                raise ValueError(f"--losses {loss_set}: --preset {preset} runs its own losses")
            # A GAP embedding has its layer's size: --dims applies to the FC runs only.
            plan = [(loss, p, emb) for loss, p in LIU2019_SUITE for emb in ("fc", "gap")]
        else:
            plan = [(loss, p, None) for loss, p in suite_losses(loss_set)]
            dims = dims or (64, 512)
        check_dataset(dataset)
        given = planned_params(plan, loss_param)
    except ValueError as err:
        raise click.ClickException(str(err)) from None
    configs = [
        c
        for loss, params, embedding in plan
        for s in seeds
        for c in make_configs(
            dataset,
            loss,
            None if embedding == "gap" else dims,
            {**params, **given[loss]},
            preset=preset or "",
            seed=s,
            embedding=embedding,
            backbone=backbone,
            **settings,
        )
    ]
    submit_runs(configs, results, dispatch, force, device)


def suite_losses(loss_set: str) -> list[tuple[str, dict]]:
    """The (loss, parameters) of a named set or of a comma-separated list of losses; a
    ValueError naming the sets and losses for a name that is neither."""
    from losses import loss_names

    if loss_set == "paper":
        return list(SUITE)
    if loss_set == "realitycheck":
        return list(REALITY_CHECK)
    planned = [*SUITE, *(p for p in REALITY_CHECK if p not in SUITE)]
    if loss_set == "all":
        named = {loss for loss, _ in planned}
        return [*planned, *((name, {}) for name in loss_names() if name not in named)]
    names = [name.strip() for name in loss_set.split(",") if name.strip()]
    unknown = [name for name in names if name not in loss_names()]
    if unknown or not names:
        raise ValueError(
            f"--losses {loss_set}: {', '.join(unknown) or 'no loss'} is neither a set "
            f"({', '.join(LOSS_SETS)}) nor a loss ({', '.join(loss_names())})"
        )
    return [(name, {}) for name in dict.fromkeys(names)]


def planned_params(plan: list, pairs: tuple[str, ...]) -> dict[str, dict]:
    """The --loss-param values of each loss of the plan; a ValueError for a parameter that
    the plan sets itself (the triplet miners) or that no loss of it takes."""
    given = name_values(pairs)
    varied = [name for _, params, _ in plan for name in params if name in given]
    if varied:
        raise ValueError(
            f"--loss-param {varied[0]}: the suite sets it itself (each triplet miner); "
            "use `run` for one"
        )
    return params_for_each([loss for loss, _, _ in plan], given)
