"""The run store: one folder per run under results/, every file written atomically.

A run is finished exactly when its metrics.json exists: it is written last, by rename, so a
killed run never looks finished.
"""

from __future__ import annotations

import json
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
        if not is_run(run_dir):  # e.g. the default report folder, cached features
            continue
        if not is_finished(run_dir):
            problems.append(f"{run_dir.name}: unfinished (no {METRICS})")
            continue
        try:
            runs.append((run_dir, read_metrics(run_dir)))
        except ValueError as err:
            problems.append(f"{run_dir.name}: {err}")
    return runs, problems
