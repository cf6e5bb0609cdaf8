"""Environment variables set for a while, then as they were."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def environment(values: Mapping[str, str], replace: bool = True) -> Iterator[None]:
    """This process's environment with `values` set (only where unset, unless `replace`), as
    it was again after: what child processes started inside inherit."""
    before = {name: os.environ.get(name) for name in values}
    chosen = {name: value for name, value in values.items() if replace or before[name] is None}
    os.environ.update(chosen)
    try:
        yield
    finally:
        for name in chosen:
            if before[name] is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = before[name]


def cache_setting() -> Path | None:
    """$NNGK_CACHE as a folder, None where unset; a ValueError naming the variable where it
    names something that exists and is no folder (else every cache write fails later, each
    naming only a path below it)."""
    value = os.environ.get("NNGK_CACHE")
    if not value:
        return None
    path = Path(value).expanduser()
    if path.exists() and not path.is_dir():
        raise ValueError(
            f"NNGK_CACHE={value} is a file, not a folder; point NNGK_CACHE at a folder "
            "(created if missing) or unset it to use ~/.cache/nngk-bench"
        )
    return path
