"""`nngk-bench tune`: the same search budget for every loss, then its best settings retrained
with several seeds and tested once."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click

from bench.cli.dispatch import dispatch_from, dispatch_options, submit_runs, wait
from bench.cli.options import DEVICE, POSITIVE, RESULTS, TUNE_DATASET, click_errors, seed_option
from bench.cli.params import loss_param_option, name_values, params_for_each
from bench.cli.settings import LOG, setting_options, settings_from
from bench.runs.config import declared
from bench.tune.choices import PRUNER_DEFAULT, PRUNER_NAMES
from bench.util.errors import first_line

# Run settings tune takes as given, for every trial and retrained run (not searched), as RunConfig
# declares them (`held`): the weights to start from (`--pretrained PATH`: the pretrained regime
# of issue 25), the backbone and its input (a folder's preset offline), the recipe options.
HELD = declared("held")


@click.command()
@click.option("--loss", "losses", required=True, help="Losses to tune, e.g. contrastive,nngk.")
@TUNE_DATASET
@click.option("--dims", type=POSITIVE, default=64, show_default=True)
@click.option(
    "--trials",
    type=POSITIVE,
    default=8,
    show_default=True,
    help="Trials per loss, complete or pruned; the first is the loss's shipped default.",
)
@click.option(
    "--epochs",
    type=POSITIVE,
    default=None,
    help="Epochs of a trial that is not pruned. Default: the data set's preset.",
)
@click.option(
    "--pruner",
    type=click.Choice(list(PRUNER_NAMES)),
    default=PRUNER_DEFAULT,
    show_default=True,
    help="What stops the trials that trail the others at the same epoch (none: every trial "
    "trains every epoch).",
)
@click.option(
    "--epoch-budget",
    type=POSITIVE,
    default=None,
    help="Also stop a loss's search once its trials have trained this many epochs (folds "
    "count apart): the budget that is equal across losses when trials are pruned.",
)
@click.option(
    "--folds",
    type=POSITIVE,
    default=1,
    show_default=True,
    help="Class folds per trial (1: the last training classes held out).",
)
@seed_option("0,1,2", "Seeds of the retrained best settings.")
@loss_param_option(
    "A loss parameter held fixed, for every loss tuned that takes it (no longer searched "
    "where the loss searches it), e.g. miner=all; repeatable."
)
@click.option("--final-epochs", type=POSITIVE, default=None, help="Default: the data set's preset.")
@click.option(
    "--cross-validate",
    is_flag=True,
    help="Retrain the best settings once per class fold and seed, each fold's validation "
    "classes held out (Musgrave et al. 2020); the report adds the folds' mean and their "
    "concatenated embeddings (<table>-tuned-folds.md). Needs --folds 2 or more.",
)
@click.option("--no-retrain", is_flag=True, help="Search only.")
@click.option(
    "--storage",
    default=None,
    help="Optuna storage URL shared by the workers (default: sqlite under RESULTS/tune).",
)
@click.option(
    "--grace",
    type=click.IntRange(min=2),
    default=60,
    show_default=True,
    help="Seconds without a heartbeat after which a worker's trial is retried (at least 2; "
    "the heartbeats come every 10 s, or every half of it where shorter).",
)
@setting_options(*HELD)
@RESULTS
@DEVICE
@LOG
@dispatch_options
def tune(
    losses, dataset, dims, trials, epochs, pruner, epoch_budget, folds, seeds, loss_param,
    final_epochs, cross_validate, no_retrain, storage, grace, results, device, log, **jobs,
):  # fmt: skip
    """Search each loss's learning rate, weight decay and own parameters with the same budget
    on validation classes, its shipped default the first trial, the trials that trail pruned
    after each epoch; retrain the best with SEEDS. Run it in several processes or on several
    machines (one --storage) to share the trials, or as --jobs submitit jobs."""
    from bench.cli.loss_sets import check_loss_name
    from bench.data.names import check_dataset_name

    names = [name.strip() for name in losses.split(",") if name.strip()]
    with click_errors():  # the names before torch is imported
        for name in names:
            check_loss_name(name)
        check_dataset_name(dataset)
        check_tunable(dataset)
    from bench.data.datasets import check_dataset
    from bench.tune.storage import check_kept
    from bench.tune.study import (
        TuneSetup,
        default_storage,
        open_study,
        preset_epochs,
    )
    from losses.registry import check_memory_taken

    dispatch = dispatch_from(jobs)
    if cross_validate and folds < 2:
        raise click.ClickException(
            f"--cross-validate trains a model per class fold: give --folds 2 or more, not {folds}"
        )
    with click_errors():
        check_dataset(dataset)  # a glyphs set's parameters
        held = held_settings(settings_from(jobs, HELD, dataset), dataset, names)
        for name in names:
            check_memory_taken(name, held.get("memory", 0))
        fixed = params_for_each(names, name_values(loss_param))
    fixed = {name: params for name, params in fixed.items() if params}
    setup = TuneSetup(
        dataset,
        dims,
        trials,
        epochs or preset_epochs(dataset, names, held),
        folds,
        grace_s=grace,
        fixed=fixed,
        settings=held,
        pruner=pruner,
        epoch_budget=epoch_budget,
    )
    url = storage or default_storage(results)
    # The URL, then each loss's trial runs on their data, before any study starts (RuntimeError:
    # weights not at hand).
    with click_errors(ValueError, RuntimeError, line=first_line):
        check_kept(url)
        check_trials(setup, names)
        setup = replace(setup, data=data_hash(dataset))
    from bench.cli.training import resumable_stops, run_compute

    # Where this process's trials train, resolved once, here. As jobs, each job resolves
    # --device where it runs (a login node may have no GPU): this process finds the study done.
    compute = run_compute(device if dispatch.executor == "none" else None)
    if dispatch.executor != "none":
        # The database and studies exist before the workers start (a ValueError: the URL, its
        # driver or its server).
        with click_errors(line=first_line):
            for name in names:
                open_study(setup, name, url)
        executor = dispatch.submitit_executor(results)
        workers = [
            executor.submit(tune_worker, setup, names, url, results, device)
            for _ in range(dispatch.jobs)
        ]
        wait(workers, f"tuning {', '.join(names)}")
    retrain = (seeds, final_epochs, cross_validate)
    with resumable_stops():  # the trial under way is queued again (its checkpoints)
        configs = [c for n in names for c in tuned_loss(setup, n, url, results, compute, *retrain)]
    configs = [replace(cfg, log=log) for cfg in configs]  # the retrained runs (not the trials)
    if configs and not no_retrain:
        # In this process, on the Compute its trials took; as jobs, each job resolves --device
        # where it runs.
        here = compute if dispatch.executor == "none" else device
        submit_runs(configs, results, dispatch, device=here)


def check_tunable(dataset: str) -> None:
    """A one-line ValueError for a data set that needs a protocol other than the metric one,
    under which tune searches (it has no --protocol, so the shared errors' remedies would
    name an option it lacks)."""
    from bench.data.emoji import EmojiSpec
    from bench.data.names import is_emoji

    if dataset == "inshop":
        raise ValueError(
            "tune searches under the metric protocol, and inshop's test is a query-gallery "
            "search, which that protocol does not make: tune on another data set"
        )
    if is_emoji(dataset) and EmojiSpec.parse(dataset).held_out:
        raise ValueError(
            f"tune searches under the metric protocol, which trains and tests on every emoji "
            f"set: drop held_out={EmojiSpec.parse(dataset).held_out} from {dataset}"
        )


def data_hash(dataset: str) -> str:
    """A short hash of the data's identity (its location and fingerprint); '' for the built-in
    sets, which have none. It names the study: a folder whose images changed is searched anew,
    never mixed into the study of the images it had."""
    from bench.data.identity import data_identity
    from bench.data.names import identity_hash

    identity = data_identity(dataset, "")
    if not any(identity.values()):
        return ""
    return identity_hash(identity["data_location"], identity["data_fingerprint"])


def tuned_loss(
    setup, name: str, url: str, results: Path, compute, seeds, final_epochs, cross_validate
):
    """The loss's study run to its end on `compute` (after workers: loaded), summarised; its
    best settings' runs to retrain."""
    from bench.tune.study import pruning_line, tune_loss, tuned_configs, write_summary

    with click_errors(ValueError, RuntimeError, line=first_line):
        study = tune_loss(setup, name, url, results, compute)
        folder = write_summary(study, setup, name, results)
    click.echo(
        f"{study.study_name}: best validation {study.best_value:.4f} with "
        f"{study.best_trial.params} ({folder})"
    )
    click.echo(f"{study.study_name}: {pruning_line(study, setup)}")
    return tuned_configs(study, setup, name, seeds, final_epochs, cross_validate)


def held_settings(given: dict, dataset: str, names: list[str]) -> dict:
    """The settings given that change a run of some loss tuned: only these name the study (so
    earlier studies keep their names), and all of them reach the runs. One equal to a run's
    default but not to the preset's (--optimizer sgd where the preset has RMSprop) is kept."""
    from bench.train.presets import make_configs

    presets = [make_configs(dataset, name, None, {})[0] for name in names]
    return {
        k: v
        for k, v in given.items()
        if v is not None and any(getattr(cfg, k) != v for cfg in presets)
    }


def check_trials(setup, names: list[str]) -> None:
    """A one-line ValueError for trials that could not run (e.g. more class folds than the
    training classes allow), before Optuna logs each failed trial's traceback."""
    from bench.train.preflight import check_runs
    from bench.tune.study import default_params, trial_configs

    for name in names:
        check_runs(trial_configs(setup, name, default_params(setup, name)))


def tune_worker(
    setup, names: list[str], storage_url: str, results: Path, device: str | None
) -> None:
    """A job: this worker's share of every loss's trials, on the shared study, where its
    --device is resolved, once (`run_compute`: this job's machine's CUDA by default)."""
    from bench.cli.training import run_compute
    from bench.tune.study import tune_loss
    from bench.util.progress import show_progress

    show_progress()
    compute = run_compute(device)
    for name in names:
        tune_loss(setup, name, storage_url, results, compute)
