"""A run's saved files as the report reads them. A file that is there but cannot be read raises
DamagedRun, which names the run, so that the report leaves out that run alone and keeps the rest
of its table."""

from __future__ import annotations

import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from bench.runs import store
from bench.util.errors import first_line


class DamagedRun(ValueError):
    """A run's file that exists but cannot be read: truncated, not what it should hold."""

    def __init__(self, path: Path, reason: str):
        path = Path(path)
        self.run_dir = str(path.parent)
        super().__init__(f"{path.parent.name}: {path.name} is damaged ({reason})")


class PartUnavailable(ValueError):
    """A table or figure that cannot be drawn from what is at hand here (a run's images are
    not on this machine, or changed since the run): named among the problems, no fault."""


def saved_embeddings(run_dir: Path, name: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(embeddings, labels) of a run's saved .npz (test or training); None where the run saved
    none; DamagedRun where it cannot be read or its arrays do not fit together."""
    path = Path(run_dir) / name
    if not path.is_file():
        return None
    try:
        with np.load(path) as saved:
            embeddings, labels = saved["embeddings"], saved["labels"]
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as err:
        raise DamagedRun(path, first_line(err)) from None
    if embeddings.ndim != 2 or labels.shape != (len(embeddings),):
        raise DamagedRun(
            path, f"embeddings {embeddings.shape} and labels {labels.shape} do not match"
        )
    if not np.issubdtype(embeddings.dtype, np.number):
        raise DamagedRun(path, f"its embeddings are {embeddings.dtype}, not numbers")
    return embeddings, labels


def saved_numbers(
    path: Path, columns: Sequence[str], text: Sequence[str] = ()
) -> pd.DataFrame | None:
    """A run's CSV table (history, curves) with these numeric `columns` and `text` columns
    (read as strings); None where the run has none; DamagedRun where it cannot be read or a
    column is missing or not numbers."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        frame = pd.read_csv(path, dtype={c: str for c in text})
    except (OSError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        raise DamagedRun(path, first_line(err)) from None
    bad = [c for c in columns if c not in frame or not pd.api.types.is_numeric_dtype(frame[c])]
    if bad:
        raise DamagedRun(path, f"column {', '.join(bad)} is not numbers")
    missing = [c for c in text if c not in frame]
    if missing:
        raise DamagedRun(path, f"it has no column {', '.join(missing)}")
    return frame


def saved_query_flags(run_dir: Path) -> np.ndarray | None:
    """Which test items are queries, where the run's protocol searches queries in a gallery
    (saved beside its test embeddings); None where every item is a query."""
    with np.load(Path(run_dir) / store.EMBEDDINGS) as saved:
        return np.asarray(saved["queries"], dtype=bool) if "queries" in saved.files else None
