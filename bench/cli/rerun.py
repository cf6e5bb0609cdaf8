"""`run --config RUN/config.json`: a run again, exactly as it recorded itself, under the same
run id (into --results: e.g. to repeat it on another machine, or after its folder was lost).
What it trains is the record's: settings that would change it are not taken beside --config;
those that do not change what a run computes (--workers, --log) and where and how it runs are."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import click

from bench.cli.dispatch import DISPATCH_NAMES
from bench.cli.settings import given
from bench.protocols import PROTOCOLS
from bench.runs import store
from bench.runs.config import DATA_IDENTITY, RunConfig

# The parameters of `run` taken beside --config.
WITH_CONFIG = ("config", "results", "force", "device", "nproc", "workers", "log", *DISPATCH_NAMES)


def check_nothing_else(ctx: click.Context) -> None:
    """A one-line error for a setting given beside --config."""
    for param in ctx.command.params:
        if param.name not in WITH_CONFIG and given(param.name):
            allowed = "--results, --force, --device, --nproc, --workers, --log, --executor"
            raise click.ClickException(
                f"--config reruns the run as it recorded itself; {param.opts[0]} would change "
                f"it (beside --config: {allowed} and its options)"
            )


def read_record(path: Path) -> dict:
    """A run's config.json (`path` or `path`/config.json), as `nngk-bench run` wrote it; a
    one-line error for anything else."""
    file = path / store.CONFIG if path.is_dir() else path
    try:
        record = json.loads(file.read_text())
    except (OSError, ValueError) as err:
        raise click.ClickException(f"{file}: not a run's config.json ({err})") from None
    if not isinstance(record, dict) or "loss" not in record:
        raise click.ClickException(f"{file}: not a run's config.json (no loss)")
    protocol = PROTOCOLS.get(record.get("protocol"))
    if protocol is not None and not protocol.trains:
        raise click.ClickException(
            f"{file}: a linear method's run (Sharma et al. 2015); `nngk-bench linear` makes it"
        )
    if "run_id" not in record:
        raise click.ClickException(
            f"{file}: an untrained baseline's record; `nngk-bench run` writes it beside any run"
        )
    return record


def recorded_config(ctx: click.Context, record: dict) -> RunConfig:
    """The RunConfig of a run's record, with --workers and --log where given."""
    kept = {k: ctx.params[k] for k in ("workers", "log") if given(k)}
    return replace(RunConfig.from_record(record), **kept)


def check_same_run(cfg: RunConfig, record: dict) -> None:
    """A ValueError unless `cfg`, with its data's identity found again, is the recorded run:
    the record was edited (its own settings give another id), or the data it trains on moved
    or changed since."""
    if cfg.run_id() == record["run_id"]:
        return
    recorded = {k: record.get(k, "") for k in DATA_IDENTITY}
    as_recorded = replace(cfg, **recorded).run_id()
    if as_recorded != record["run_id"]:
        # The record's own settings, with the data identity it recorded, give another id.
        why = (
            f"its config.json was edited, or written by another version (its settings are run "
            f"{as_recorded}): restore it, or give those settings to `run` without --config"
        )
    else:
        changed = [k for k in DATA_IDENTITY if getattr(cfg, k) != recorded[k]]
        now = getattr(cfg, changed[0])
        why = f"its data changed or moved since ({', '.join(changed)}: now {now})"
    raise ValueError(f"the rerun would be {cfg.run_id()}, not {record['run_id']}: {why}")
