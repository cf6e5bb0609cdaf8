"""How the commands train their runs in this process: the data set's baseline, then each
run (skipped when finished, resumed when interrupted, retrained beside it with --force), or
all of them together on several processes under torchrun; one-line errors. SIGTERM (what
Slurm sends before it kills a job) stops a run as Ctrl-C does: the same command resumes it."""

from __future__ import annotations

import shutil
import signal
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from bench.cli import first_process
from bench.cli.interrupt import signals_handled
from bench.cli.options import click_errors
from bench.runs import store
from bench.runs.weights import changed_weights
from bench.util.errors import first_line
from bench.util.progress import log

if TYPE_CHECKING:
    import torch

    from bench.data.datasets import DataSplits
    from bench.train.compute import Compute

INTERRUPTED = "interrupted; run the same command again to resume"


def run_compute(name: str | None) -> Compute:
    """The --device checked (`checked_device`) and resolved, once, into where this process's
    runs compute (`Compute`: CUDA where present when none is given; the search's device)."""
    from bench.train.compute import Compute

    return Compute.resolve(checked_device(name))


def checked_device(name: str | None) -> torch.device | None:
    """The --device as a torch device (None when none is given: `run_compute` resolves it); a
    one-line error for a name torch does not know or for CUDA on a machine without it."""
    if name is None:  # before torch's import: `run`'s checks of its inputs come first
        return None
    import torch

    try:
        device = torch.device(name)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda"):  # mps, xla, ...: not supported
        raise click.ClickException(
            f"unknown --device {name!r}; expected cpu, cuda or cuda:N"
        ) from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise click.ClickException(
            f"--device {name}: CUDA is not available on this machine; use --device cpu or leave "
            "--device out"
        )
    return device


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised wherever the process is, as Ctrl-C raises KeyboardInterrupt: a file being
    written is left as it was (files are written atomically), and the run resumes from its
    last checkpoint."""


def raise_terminated(signum: int, frame) -> None:
    raise Terminated


@contextmanager
def resumable_stops():
    """Inside, SIGTERM stops as Ctrl-C does, and either ends the command with a line saying
    how to resume (exit 130, or 143 for SIGTERM): what was stopped resumes from its last
    checkpoint, its files written atomically."""
    try:
        with signals_handled(raise_terminated, (signal.SIGTERM,)):
            yield
    except KeyboardInterrupt as stop:
        if first_process():
            click.echo(INTERRUPTED, err=True)
        sys.exit(128 + signal.SIGTERM if isinstance(stop, Terminated) else 130)


def identified(configs: list) -> list:
    """The configs with their data's identity, each one's embedding checked (a one-line
    ValueError otherwise)."""
    from bench.models.backbones import check_embedding
    from bench.train.loaders import with_data_identity

    configs = with_data_identity(configs)
    for cfg in configs:
        check_embedding(cfg.backbone, cfg.embedding, cfg.dims)
    return configs


def checked_runs(configs: list, world: int = 1) -> tuple[list, DataSplits]:
    """The configs with their data's identity, and the first one's data, once every run is
    checked (its embedding, batches and splits: `bench.train.preflight`); a one-line
    ValueError, before anything is written, for the first that is not right."""
    from bench.train.preflight import check_runs

    configs = identified(configs)
    return configs, check_runs(configs, world)


def run_all(configs: list, results: Path, force: bool, compute: Compute) -> None:
    """The baseline of the first config's data set, then every config, where --device was
    resolved, once for all of them (`run_compute`); one-line errors, and on Ctrl-C or SIGTERM a
    line saying how to resume (exit 130 or 143)."""
    with click_errors(ValueError, RuntimeError, line=first_line):
        with resumable_stops():
            diverged = train_all(configs, results, force, compute)
    if diverged:
        raise click.ClickException(diverged_line(results, diverged))


def diverged_line(results: Path, diverged: list[str]) -> str:
    """The runs that diverged, and what may train them: a lower --lr, or other values of the
    loss parameters they were given (read from their config.json), which a learning rate
    cannot make finite."""
    from bench.train.guards import scaling_params_text

    texts = {scaling_params_text(given_loss_params(results / run)) for run in diverged}
    given = sorted(text for text in texts if text)
    also = f", or other values of the loss parameters given ({'; '.join(given)})," if given else ""
    return (
        f"{len(diverged)} run(s) diverged and were tested at their best epoch before it "
        f"({', '.join(diverged)}); a lower --lr{also} may train them (metrics.json: diverged)"
    )


def given_loss_params(run_dir: Path) -> dict:
    """The loss parameters a run was given (its config.json's loss_params); {} where unread."""
    import json

    try:
        params = json.loads((run_dir / store.CONFIG).read_text()).get("loss_params")
    except (OSError, ValueError, AttributeError):
        return {}
    return params if isinstance(params, dict) else {}


def train_all(configs: list, results: Path, force: bool, compute: Compute) -> list[str]:
    """Every run checked, then the baseline of the first one's data set and every run (all
    processes together under torchrun), each given `compute`; the runs that diverged."""
    from bench.data.sources.folder import check_outside_data
    from bench.train.baseline import run_baseline
    from bench.train.distributed import ranks_from_env
    from bench.train.preflight import check_runs
    from bench.train.trainer import Trainer

    ranks = ranks_from_env(compute.device)
    # nothing written into a folder: data set's images, where it would be read as a class
    check_outside_data(results, [c.dataset for c in configs], "--results")
    configs = identified(configs)
    if ranks.world == 1:  # what it does from the start: the checks load the data
        log.info(f"{len(configs)} run(s) into {results}; first the data set's baseline")
    data = check_runs(configs, ranks.world)
    if ranks.world > 1:
        return train_distributed(configs, results, force, compute, ranks, data)
    run_baseline(configs[0], results, compute, data)
    return [
        cfg.run_id()
        for cfg in configs
        if train_one(cfg, results / cfg.run_id(), force, compute, Trainer)
    ]


def train_distributed(
    configs: list,
    results: Path,
    force: bool,
    compute: Compute,
    ranks,
    data: DataSplits | None = None,
) -> list[str]:
    """Under torchrun: the first process writes the baseline and says which runs are
    finished; all processes train each other run together (bench/train/distributed.py).
    The runs that diverged."""
    import logging

    from bench.train.baseline import run_baseline
    from bench.train.distributed import share_from_main
    from bench.train.trainer import Trainer

    if force:
        raise ValueError("--force needs one process; run it without torchrun or --nproc")
    if ranks.main:
        log.info(f"{len(configs)} run(s) on {ranks.world} processes into {results}")
        run_baseline(configs[0], results, compute, data)
    else:
        log.setLevel(logging.WARNING)
    diverged = []
    for cfg in configs:
        run_dir = results / cfg.run_id()
        if share_from_main(ranks.main and store.is_finished(run_dir), ranks):
            if ranks.main:
                note = processes_note(recorded(run_dir), ranks.world)
                click.echo(f"{run_dir}: finished{note}, skipped")
            continue
        metrics = Trainer(cfg, run_dir, compute).fit()
        if ranks.main:
            click.echo(f"{run_dir}: {summary_line(metrics)}")
        if "diverged" in metrics:
            diverged.append(cfg.run_id())
    return diverged


def recorded(run_dir: Path) -> dict:
    """A finished run's metrics, or none where they cannot be read (its skip line says less)."""
    try:
        return store.read_metrics(run_dir)
    except ValueError:
        return {}


def processes_note(metrics: dict, asked: int) -> str:
    """'; it ran on 1 process, not the 2 asked for' where a finished run's recorded processes
    differ from this command's: --nproc is not in the run id, so the run is not trained again
    (docs/cluster.md says how they differ)."""
    ran = metrics.get("processes")
    if not isinstance(ran, int) or ran == asked:
        return ""
    plural = "es" if ran > 1 else ""
    return (
        f"; it ran on {ran} process{plural}, not the {asked} asked for (--nproc is not in the "
        "run id: another --results trains it apart)"
    )


def summary_line(metrics: dict) -> str:
    """A finished run's test R@1, NMI (unless --clustering none) and MAP@R, and where it
    diverged if it did."""
    keys = [key for key in ("recall@1", "nmi", "map@r") if key in metrics]
    line = "  ".join(f"{key}={metrics[key]:.4f}" for key in keys)
    if "diverged" in metrics:
        line += f"  (diverged at {metrics['diverged']}; tested epoch {metrics['best_epoch']})"
    return line


def train_one(cfg, run_dir: Path, force: bool, compute: Compute, trainer_cls) -> bool:
    """Train a run, skip it when finished, or with --force retrain it beside the finished one,
    which is replaced only when the rerun has finished (a failed rerun loses nothing; the
    same command resumes it); another process at it first is waited for. Whether the run
    diverged."""
    from bench.data.image_cache import cache_folder

    with store.run_lock(run_dir, cache_folder() / "locks", say=log.info):
        store.remove_stale_temporaries(run_dir)
        return train_locked(cfg, run_dir, force, compute, trainer_cls)


def train_locked(cfg, run_dir: Path, force: bool, compute: Compute, trainer_cls) -> bool:
    store.recover_run(run_dir)
    finished = store.is_finished(run_dir)
    if finished and not force:
        metrics = finished_record(run_dir)
        changed = changed_weights(metrics, cfg.pretrained)
        if changed:
            raise ValueError(f"{run_dir.name}: finished, but {changed}")
        diverged = metrics.get("diverged")
        note = f"; it diverged at {diverged}" if diverged else ""
        note += processes_note(metrics, 1)
        if store.staging_folder(run_dir).is_dir():  # a --force rerun, killed part-way
            note += f"; its --force rerun stopped part-way in {store.staging_folder(run_dir)}"
        click.echo(f"{run_dir}: finished{note}, skipped (--force redoes it)")
        return False
    if force and not finished and run_dir.exists():
        shutil.rmtree(run_dir)  # an unfinished run: nothing to keep
    target = store.staging_folder(run_dir) if finished else run_dir
    metrics = trainer_cls(cfg, target, compute).fit()
    if finished:
        store.replace_run(target, run_dir)
    click.echo(f"{run_dir}: {summary_line(metrics)}")
    return "diverged" in metrics


def finished_record(run_dir: Path) -> dict:
    """A finished run's metrics, once its record is whole as the report reads it; else a
    one-line ValueError saying how to retrain it (it was skipped as finished, while `report`
    left it out and said to run the same command again, which skipped it again)."""
    import zipfile

    from bench.report.records import config_fault, metrics_fault

    try:
        metrics = store.read_metrics(run_dir)
        fault = f"its {store.METRICS} {found}" if (found := metrics_fault(metrics)) else ""
    except ValueError as err:
        metrics, fault = {}, first_line(err).removeprefix(f"{run_dir}: ")
    if not fault and (found := config_fault(run_dir, metrics)):
        fault = f"{'it' if found.startswith('has ') else 'its'} {found}"
    embeddings = Path(run_dir) / store.EMBEDDINGS
    if not fault and embeddings.exists() and not zipfile.is_zipfile(embeddings):
        fault = f"its {store.EMBEDDINGS} is damaged (not a whole .npz)"
    if fault:
        raise ValueError(
            f"{run_dir.name}: finished, but {fault}; --force retrains it (with only this run's "
            "--loss, --dims and --seed, the other runs stay as they are)"
        )
    return metrics
