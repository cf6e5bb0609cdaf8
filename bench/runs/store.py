"""The run store: one folder per run under results/, every file written atomically.

A run is finished exactly when its metrics.json exists: it is written last, by rename, so a
killed run never looks finished.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import zipfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from bench.util.hashing import file_sha256

METRICS = "metrics.json"
CONFIG = "config.json"
HISTORY = "history.csv"
CHECKPOINT = "checkpoint.pt"
EMBEDDINGS = "test_embeddings.npz"
TRAIN_EMBEDDINGS = "train_embeddings.npz"
# Each test query's R@K hits and AP@R, tied to the test embeddings they were computed from:
# `scores` (metrics x queries) and `record` (JSON: the metrics' names, the format, the size and
# sha256 of the embeddings file). Two arrays: each array of an .npz costs ~50 us to read.
QUERY_SCORES = "test_query_scores.npz"
SCORES_FORMAT = 1


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


def _save_npz(path: Path, **arrays: np.ndarray) -> None:
    from bench.util.atomic import atomic_save_npz  # torch: not for the commands' --help

    atomic_save_npz(path, **arrays)


def save_query_scores(
    run_dir: Path, scores: Mapping[str, np.ndarray], embeddings_file: str | Path = EMBEDDINGS
) -> Path:
    """Write each test query's scores (name -> one value per query, in query order, as
    `bench.evaluation.retrieval.query_scores` gives them) into the run's QUERY_SCORES, with the
    size and sha256 of the embeddings file (in `run_dir`, or a path) they were computed from,
    so that `read_query_scores` never trusts them once that file changed."""
    names = [str(name) for name in scores]
    rows = [np.asarray(values, dtype=np.float64) for values in scores.values()]
    shapes = {row.shape for row in rows}
    if len(shapes) != 1 or len(next(iter(shapes))) != 1:
        raise ValueError(f"per-query scores need one value per query each, got shapes {shapes}")
    source = Path(run_dir) / embeddings_file
    record = {"format": SCORES_FORMAT, "names": names, **_identity(source, file_sha256(source))}
    path = Path(run_dir) / QUERY_SCORES
    record_text = np.array(json.dumps(record, sort_keys=True))
    _save_npz(path, scores=np.stack(rows), record=record_text)
    return path


def _identity(source: Path, sha256: str) -> dict:
    """What ties scores to the embeddings file they came from: its size, modification time
    (nanoseconds) and sha256."""
    stat = source.stat()
    return {
        "embeddings_bytes": stat.st_size,
        "embeddings_mtime_ns": stat.st_mtime_ns,
        "embeddings_sha256": sha256,
    }


def save_test_embeddings(
    run_dir: Path,
    embeddings: np.ndarray,
    labels: np.ndarray,
    scores: Mapping[str, np.ndarray],
    queries: np.ndarray | None = None,
) -> None:
    """The test embeddings and labels (with a gallery, the query flags too: which items are
    queries), then each query's scores beside them (`save_query_scores`), so that the report
    never searches them again."""
    flags = {} if queries is None else {"queries": np.asarray(queries, dtype=bool)}
    _save_npz(Path(run_dir) / EMBEDDINGS, embeddings=embeddings, labels=labels, **flags)
    save_query_scores(run_dir, scores, EMBEDDINGS)


def save_train_embeddings(run_dir: Path, embeddings: np.ndarray, labels: np.ndarray) -> None:
    """The training split's embeddings and labels (what the visualisations draw)."""
    _save_npz(Path(run_dir) / TRAIN_EMBEDDINGS, embeddings=embeddings, labels=labels)


def history_csv(rows: list[dict]) -> bytes:
    """history.csv's content: a row per epoch so far."""
    import pandas as pd

    return pd.DataFrame(rows).to_csv(index=False).encode()


def read_query_scores(
    run_dir: Path, embeddings_file: str | Path = EMBEDDINGS
) -> dict[str, np.ndarray] | None:
    """The per-query scores `save_query_scores` wrote, where they are whole and of the
    embeddings file as it is now; None where there are none, or they are damaged, truncated,
    of another format or stale (the embeddings changed since): the caller scores again."""
    path, source = Path(run_dir) / QUERY_SCORES, Path(run_dir) / embeddings_file
    if not path.is_file() or not source.is_file():
        return None
    try:
        with np.load(path) as saved:
            table, record = saved["scores"], json.loads(saved["record"].item())
    except (OSError, ValueError, TypeError, KeyError, EOFError, zipfile.BadZipFile):
        return None
    stat = source.stat()
    if not _fits(table, record) or not _of(record, source, stat):
        return None
    if record.get("embeddings_mtime_ns") != stat.st_mtime_ns:
        _restamp(path, table, record, source)
    return dict(zip(record["names"], table, strict=True))


def _restamp(path: Path, table: np.ndarray, record: dict, source: Path) -> None:
    """Record the embeddings file's modification time beside scores its hash has just
    confirmed (a copied folder, or scores of an earlier version), so that the next report
    does not read the file again; left as it was where the folder cannot be written."""
    record = {**record, **_identity(source, record["embeddings_sha256"])}
    try:
        _save_npz(path, scores=table, record=np.array(json.dumps(record, sort_keys=True)))
    except OSError:
        pass


def _fits(table: np.ndarray, record: object) -> bool:
    """A record of this format naming one row of floats per metric."""
    return (
        isinstance(record, dict)
        and record.get("format") == SCORES_FORMAT
        and isinstance(record.get("names"), list)
        and table.dtype == np.float64
        and table.ndim == 2
        and len(table) == len(record["names"])
    )


def _of(record: dict, source: Path, stat: os.stat_result) -> bool:
    """Whether the record names `source` as it is now: its size; then its modification time,
    as make and rsync trust it (the harness replaces a file whole, so a new one has a new
    time); only where that differs, its sha256, which reads the whole file (tens of ms for a
    run's embeddings, every run at every report)."""
    if record.get("embeddings_bytes") != stat.st_size:
        return False
    if record.get("embeddings_mtime_ns") == stat.st_mtime_ns:
        return True
    return record.get("embeddings_sha256") == file_sha256(source)


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


@contextmanager
def run_lock(run_dir: Path, locks: Path, say: Callable[[str], None]) -> Iterator[None]:
    """Held while this process trains, or replaces, the run: the same command started twice on
    one results folder waits here (said once through `say`), then finds the run finished,
    instead of training it twice or removing what the other is writing (two --force). The
    lock file is in `locks` (the cache's), named by the run folder's resolved path: the
    results folder holds runs alone."""
    where = hashlib.sha1(str(Path(run_dir).resolve()).encode()).hexdigest()[:20]
    lock = Path(locks) / f"{where}.lock"  # a run's name may be as long as a file's may
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as file:  # the lock ends with the file, even if this process is killed
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"{run_dir}: another process is training it; waiting for it to end")
            fcntl.flock(file, fcntl.LOCK_EX)
        yield


def remove_stale_temporaries(run_dir: Path) -> None:
    """The temporary files of atomic writes whose process was killed (.NAME.XXXX.tmp, as big
    as a checkpoint), in the run and its staging folder; under the run's lock, no other
    process is writing them."""
    for folder in (Path(run_dir), staging_folder(run_dir)):
        if folder.is_dir():
            for tmp in folder.glob(".*.tmp"):
                tmp.unlink(missing_ok=True)
