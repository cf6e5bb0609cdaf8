"""`nngk-bench run`: train and evaluate a loss on a data set, a run per embedding size and seed."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from bench.cli.dispatch import dispatch_from, dispatch_options, submit_runs
from bench.cli.loss_sets import planned_losses
from bench.cli.options import (
    DATASET,
    DEVICE,
    FORCE,
    LOSS,
    NPROC,
    RESULTS,
    check_results_folder,
    click_errors,
    dims_option,
    seed_option,
)
from bench.cli.params import given_params, loss_param_options, planned_params
from bench.cli.rerun import check_nothing_else, check_same_run, read_record, recorded_config
from bench.cli.settings import setting_options, settings_from
from bench.cli.training import checked_device, checked_runs, identified
from bench.data.names import FOLDER_PREFIX
from bench.runs.config import RunConfig
from bench.util.errors import first_line


def check_choices(loss: str, dataset: str, data_root: str | None = None, here: bool = True) -> None:
    """A ValueError naming the valid choices, the nearest first, for an unknown loss (or
    list or set of losses) or data set, or naming a data set that is not there; a glyphs or
    emoji set's parameters checked last (their module imports torch)."""
    check_named(loss, dataset, data_root, here)
    check_set_params(dataset)


def check_named(loss: str, dataset: str, data_root: str | None = None, here: bool = True) -> None:
    """The names of the losses and the data set known, the data there (where the runs train
    `here`: a Slurm job may read data that its login node lacks): before torch is imported,
    so that these errors come in a second, not after its import (issue 69, item 9)."""
    from bench.data.names import check_dataset_name
    from bench.data.presence import check_data_present

    planned_losses(loss)
    check_dataset_name(dataset)
    if here:
        check_data_present(dataset, data_root)


def check_set_params(dataset: str) -> None:
    """A glyphs or emoji set's parameters (what else check_dataset checks, `check_named` has)."""
    from bench.data.names import is_emoji, is_glyphs

    if is_glyphs(dataset) or is_emoji(dataset):
        from bench.data.datasets import check_dataset

        check_dataset(dataset)


@click.command()
@LOSS
@DATASET
@dims_option()
@seed_option("0")
@setting_options()
@loss_param_options
@click.option(
    "--triplet-form",
    type=click.Choice(["margin", "nca"]),
    default="margin",
    show_default=True,
    help="nca: Liu et al. 2019's NCA form (the loss triplet-nca).",
)
@click.option(
    "--config",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="A run's config.json (or its folder): that run again, as it was, under its run id. "
    "Beside it only --results, --force, --device, --nproc, --workers, --log and the "
    "executor's options.",
)
@RESULTS
@FORCE
@DEVICE
@NPROC
@dispatch_options
@click.pass_context
def run(ctx, loss, dataset, dims, seeds, triplet_form, config, results, force, device, nproc,
        **options):  # fmt: skip
    """Train and evaluate each LOSS on DATASET, one run per loss, embedding size and seed;
    the data set's baselines first. With several losses and seeds, `report` compares them."""
    dispatch = dispatch_from(options)
    check_results_folder(results)  # before anything is imported or trained
    if nproc > 1 and dispatch.executor != "none":  # each torchrun process would submit its jobs
        raise click.ClickException(
            f"--nproc {nproc} runs here under torchrun, --executor {dispatch.executor} runs as "
            "jobs: give one of them"
        )
    if config is not None:
        configs = [rerun_config(ctx, config)]
    else:
        if triplet_form == "nca":
            if loss != "triplet":
                raise click.ClickException("--triplet-form nca applies to --loss triplet only")
            loss = "triplet-nca"
        here = dispatch.executor != "slurm"
        configs = planned_configs(loss, dataset, dims, seeds, options, here)
    if nproc > 1 and "WORLD_SIZE" not in os.environ:
        checked_device(device)  # one line here, not one per process from under torchrun
        check_before_torchrun(configs, nproc)
        relaunch_with_torchrun(nproc)
    # The device is resolved where the runs train (`training.run_all`), once: in this process,
    # or in each job (a login node may have no GPU).
    submit_runs(configs, results, dispatch, force, device)


def planned_configs(
    loss: str,
    dataset: str,
    dims: tuple[int, ...] | None,
    seeds: tuple[int, ...],
    options: dict,
    here: bool = True,
) -> list[RunConfig]:
    """A config per loss of `loss` (a name, a list or a set), embedding size and seed: the
    preset's settings, the options' on top; the data checked to be there where `here`."""
    settings = settings_from(options, dataset=dataset)
    with click_errors():
        check_named(loss, dataset, settings.get("data_root"), here)
        plan = planned_losses(loss)
        params = planned_params(plan, *given_params(options))  # imports torch and PML
        check_set_params(dataset)  # then the data sets' module too (its own seconds)
    protocol = settings.pop("protocol")  # make_configs takes these two by name
    preset = settings.pop("preset") or ""
    return [
        c
        for (name, _), given in zip(plan, params, strict=True)
        for s in seeds
        for c in checked_configs(
            dataset, name, dims, given, protocol=protocol, preset=preset, seed=s, **settings
        )
    ]


def rerun_config(ctx: click.Context, path: Path) -> RunConfig:
    """The config a run recorded (`--config`), its data found again: the same run id."""
    check_nothing_else(ctx)
    record = read_record(path)
    cfg = recorded_config(ctx, record)
    try:
        check_choices(cfg.loss, cfg.dataset, cfg.data_root)
        (cfg,) = identified([cfg])
        check_same_run(cfg, record)
    except (ValueError, FileNotFoundError, RuntimeError) as err:
        why = f"{path}: {str(err).splitlines()[0]}{started_elsewhere(record)}"
        raise click.ClickException(why) from None
    return cfg


def started_elsewhere(record: dict) -> str:
    """Where a run of a relative folder (folder:imgs) read it, for a rerun from another
    working folder, which reads another folder or none: '' for any other run."""
    dataset, location = str(record.get("dataset", "")), record.get("data_location") or ""
    folder = dataset.removeprefix(FOLDER_PREFIX)
    if not dataset.startswith(FOLDER_PREFIX) or not location or Path(folder).is_absolute():
        return ""
    if Path(folder).expanduser().resolve() == Path(location):
        return ""
    return f" (the run read {location}: run --config from the folder it was started in)"


def checked_configs(dataset: str, loss: str, dims, params: dict, **settings) -> list:
    """`make_configs`, with a one-line error for settings that do not go together."""
    from bench.train.option_checks import check_steps_come
    from bench.train.presets import make_configs

    with click_errors():
        configs = make_configs(dataset, loss, dims, params, **settings)
        for cfg in configs if settings.get("schedule") else []:
            check_steps_come(cfg)
    return configs


def check_before_torchrun(configs: list, nproc: int) -> None:
    """Every run checked for `nproc` processes (a batch they can share, its data's splits)
    here, so that a fault is one line rather than one per process and torchrun's report."""
    with click_errors(ValueError, RuntimeError, line=first_line):
        checked_runs(configs, nproc)


def relaunch_with_torchrun(nproc: int) -> None:
    """This command again, without --nproc, as `nproc` processes under torchrun (one machine)."""
    args, skip = [], False
    for arg in sys.argv[1:]:
        if skip or arg.startswith("--nproc="):
            skip = False
            continue
        skip = arg == "--nproc"
        if not skip:
            args.append(arg)
    sys.exit(torchrun(["--standalone", f"--nproc_per_node={nproc}", "-m", "bench.cli", *args]))


def torchrun(args: list[str]) -> int:
    """torchrun with `args`, its agent in this process: its exit status, and on a Ctrl-C or
    SIGTERM (which it passes to its processes, each stopping at its last checkpoint) or a
    process's failure (which that process has said in one line) no traceback of its own."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser
    from torch.distributed.run import run as launch

    try:
        launch(get_args_parser().parse_args(args))
    except SignalException as stop:
        return 128 + int(stop.sigval)
    except ChildFailedError as failed:
        code = next(iter(failed.failures.values())).exitcode
        return 128 - code if code < 0 else code or 1  # -9: killed by SIGKILL
    return 0
