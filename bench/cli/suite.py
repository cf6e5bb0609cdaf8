"""`nngk-bench suite`: a set of losses compared on a data set (by default the core losses on
glyphs, 3 seeds: reports/), under a paper preset's settings (`--preset`), or Liu et al. 2019's
strategies. `run` takes the same lists and sets (`--loss paper`); the suite is the comparison's
own name and defaults."""

from __future__ import annotations

import click

from bench.cli.dispatch import dispatch_from, dispatch_options, submit_runs
from bench.cli.loss_sets import LOSS_HELP, PAPER, planned_losses
from bench.cli.options import (
    DATASET,
    DEVICE,
    FORCE,
    RESULTS,
    click_errors,
    dims_option,
    seed_option,
)
from bench.cli.params import loss_param_option, name_values, planned_params
from bench.cli.settings import PresetChoice, run_settings, setting_options, settings_from

SUITE = PAPER  # the suite's losses by default: what CI and reports/ run

# Liu et al. 2019's selection strategies (NCA-form triplets; N-pair), each with FC and GAP
# embeddings.
LIU2019_SUITE = (
    ("triplet-nca", {"miner": "all"}),
    ("triplet-nca", {"miner": "semihard"}),
    ("triplet-nca", {"miner": "easy-positive"}),
    ("npair", {}),
)


# The run settings the suite takes as `run` does: all but its own --preset, which chooses among
# the suite's plans.
SUITE_SETTINGS = tuple(name for name in run_settings() if name != "preset")


@click.command()
@DATASET
@dims_option(
    "Default: the data set's preset's (glyphs, digits: 64,512; liu2019: 64, GAP its own size; "
    "proxy-anchor: 512; vit: 384)."
)
@seed_option("0,1,2")
@click.option(
    "--preset",
    type=PresetChoice(),
    default=None,
    help="liu2019: Liu et al. 2019's four selection strategies with FC and GAP embeddings "
    "(Table 1); proxy-anchor, vit: the --losses set under Kim et al. 2020's recipe or the ViT "
    "track's (`run --help`, --preset).",
)
@click.option("--losses", "loss_set", default="paper", show_default=True, help=LOSS_HELP)
@setting_options(*SUITE_SETTINGS)
@loss_param_option(
    "A loss parameter for every loss of the suite that takes it, e.g. sigma=2.0 (NNGK) or "
    "margin=0.1 (triplet); repeatable. The triplet miners are the suite's own."
)
@RESULTS
@FORCE
@DEVICE
@dispatch_options
def suite(dataset, dims, seeds, preset, loss_set, loss_param, results, force, device, **options):
    """A set of losses compared on DATASET (by default the seven core losses, triplet with
    each miner, on glyphs: the comparison in reports/), 3 seeds each. With --preset liu2019,
    Liu et al. 2019's strategies with FC and GAP embeddings instead; with another --preset, the
    losses under its settings."""
    from bench.cli.run import check_choices, checked_configs

    dispatch = dispatch_from(options)
    settings = settings_from(options, SUITE_SETTINGS, dataset)
    with click_errors():
        check_choices(loss_set, dataset, settings.get("data_root"), dispatch.executor != "slurm")
        if preset == "liu2019":
            if loss_set != "paper":
                raise ValueError(f"--losses {loss_set}: --preset {preset} runs its own losses")
            # A GAP embedding has its layer's size: --dims applies to the FC runs only.
            plan = [(loss, p, emb) for loss, p in LIU2019_SUITE for emb in ("fc", "gap")]
        else:
            plan = [(loss, p, None) for loss, p in planned_losses(loss_set)]
        given = planned_params([(loss, p) for loss, p, _ in plan], name_values(loss_param))
    protocol, chosen_embedding = settings.pop("protocol"), settings.pop("embedding")
    configs = [
        c
        for (loss, _, embedding), params in zip(plan, given, strict=True)
        for s in seeds
        for c in checked_configs(
            dataset,
            loss,
            None if embedding == "gap" else dims,
            params,
            protocol=protocol,
            preset=preset or "",
            seed=s,
            embedding=embedding or chosen_embedding,
            **settings,
        )
    ]
    submit_runs(configs, results, dispatch, force, device)
