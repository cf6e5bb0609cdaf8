"""Environment variables set for a while, then as they were."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager


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
