"""The run store: one folder per run under results/, every file written atomically.

A run is finished exactly when its metrics.json exists: it is written last, by rename, so a
killed run never looks finished.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

METRICS = "metrics.json"
CONFIG = "config.json"
HISTORY = "history.csv"
CHECKPOINT = "checkpoint.pt"
EMBEDDINGS = "test_embeddings.npz"
TRAIN_EMBEDDINGS = "train_embeddings.npz"


def is_run(folder: Path) -> bool:
    """A run folder has its config.json from its start, and its metrics.json at its end."""
    return (Path(folder) / CONFIG).is_file() or is_finished(folder)


def is_finished(run_dir: Path) -> bool:
    return (Path(run_dir) / METRICS).is_file()


def read_metrics(run_dir: Path) -> dict:
    """The final metrics of a finished run; ValueError if missing or unreadable."""
    path = Path(run_dir) / METRICS
    try:
        metrics = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{run_dir}: unreadable {METRICS} ({err})") from err
    if not isinstance(metrics, dict):
        raise ValueError(f"{run_dir}: {METRICS} is not a JSON object")
    return metrics


def scan_runs(results: Path) -> tuple[list[tuple[Path, dict]], list[str]]:
    """(finished runs with their metrics, one problem line per unfinished or corrupt folder)."""
    runs, problems = [], []
    results = Path(results)
    if not results.is_dir():
        return runs, problems
    for run_dir in sorted(p for p in results.iterdir() if p.is_dir()):
        # Hidden: a forced rerun's staging folder; not a run: the report folder, features.
        if run_dir.name.startswith(".") or not is_run(run_dir):
            continue
        if not is_finished(run_dir):
            problems.append(f"{run_dir.name}: unfinished (no {METRICS})")
            continue
        try:
            runs.append((run_dir, read_metrics(run_dir)))
        except ValueError as err:
            problems.append(f"{run_dir.name}: {err}")
    return runs, problems


def staging_folder(run_dir: Path) -> Path:
    """Where a forced rerun trains, beside the finished run it is to replace."""
    return Path(run_dir).parent / f".{Path(run_dir).name}.forced"


def replace_run(staged: Path, run_dir: Path) -> None:
    """Put a finished rerun in place of the old run, which is removed only after the swap: at
    every moment one of the two is whole (`recover_run` undoes an interrupted swap)."""
    old = Path(run_dir).parent / f".{Path(run_dir).name}.old"
    shutil.rmtree(old, ignore_errors=True)
    if Path(run_dir).exists():
        os.replace(run_dir, old)
    os.replace(staged, run_dir)
    shutil.rmtree(old, ignore_errors=True)


def recover_run(run_dir: Path) -> None:
    """The old run back in place, if a swap was interrupted between its two renames."""
    old = Path(run_dir).parent / f".{Path(run_dir).name}.old"
    if not Path(run_dir).exists() and is_finished(old):
        os.replace(old, run_dir)
