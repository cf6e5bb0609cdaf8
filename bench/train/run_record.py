"""What a training run writes of itself: its config.json when it starts, its metrics.json when it
ends (the tested checkpoint's metrics, or a tuning trial's validation score), with its settings
(`run_summary`) and how training went (the chosen epoch's score, where it diverged, the loss's
trend, the warnings).

Each function takes the trainer as `run` (`bench.train.trainer.Trainer`): its settings, data,
loss, optimizer and run folder, as the protocol's evaluations take it."""

from __future__ import annotations

from typing import Any

import torch

from bench.runs import store
from bench.train.baseline import run_summary
from bench.train.guards import below_init, loss_trend
from bench.train.loaders import input_size, sampler_text, split_counts
from bench.util.atomic import atomic_write_json
from bench.util.progress import log
from bench.util.runtime import package_versions
from losses import loss_defaults


def config_record(run: Any) -> dict:
    """config.json: the run's settings, its id, weights, the loss's parameters as resolved,
    the packages' versions and where it computes."""
    return {
        **run.cfg.to_dict(),
        "run_id": run.name,
        "weights": run.weights,
        "resolved_loss_params": {**loss_defaults(run.cfg.loss), **run.cfg.loss_params},
        "versions": {**package_versions(), **run.data.packages},
        "device": str(run.device),
        "torch_threads": torch.get_num_threads(),  # a CPU run's bits depend on it (README)
    }


def note(name: str, progress: dict, warnings: list[str]) -> None:
    """Log each new warning of run `name` once, and keep it in `progress` for metrics.json."""
    kept = progress.setdefault("warnings", [])
    for text in warnings:
        if text not in kept:
            log.warning(f"{name}: {text}")
            kept.append(text)


def trained_summary(run: Any, progress: dict) -> dict:
    """What a trained run's metrics.json records of its settings and its training; a tested
    run's (not a tuning trial's) with its untrained network's metrics, the loss's parameters
    as resolved, its inputs, sampler, splits and processes."""
    summary = run_summary(
        run.cfg,
        best_epoch=progress["best"]["epoch"],
        optimizer=run.optimizer_text(),
        weights=run.weights,
    )
    if run.testing:
        summary.update(
            untrained_network=progress["untrained_network"],
            loss_params={**loss_defaults(run.cfg.loss), **run.cfg.loss_params},
            input_size=input_size(run.data),
            sampler=sampler_text(run.cfg, run.loss, run.data),
            split_counts=split_counts(run.data),
            processes=run.ranks.world,
        )
    return summary


def write_metrics(run: Any, progress: dict, metrics: dict) -> dict:
    """metrics.json, written last: `metrics` with how training went (the validation score
    of the chosen epoch, where it diverged, the loss's trend, the warnings: the loss's, and
    one where its test ended below its untrained network's)."""
    metrics["val_score"] = progress["best"]["score"]
    if "diverged" in progress:
        metrics["diverged"] = progress["diverged"]
    trend, warnings = loss_trend(progress["history"], progress.get("step_losses"))
    note(run.name, progress, warnings + below_init(metrics, run.cfg.lr))
    metrics.update(trend)
    metrics["warnings"] = progress.get("warnings", [])
    run.writes.wait()  # the last checkpoint on disk (or its error) before the run is done
    atomic_write_json(run.run_dir / store.METRICS, metrics)
    return metrics
