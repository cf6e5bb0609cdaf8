"""Atomic file writes: a file is either its old content or its whole new content, never half."""

from __future__ import annotations

import io
import json
import os
import tempfile
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch


def umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write through a temporary file renamed into place, with the mode a plain open() would
    give (mkstemp's 0600 otherwise); an OSError names `path` (a full disk, a read-only
    folder), and leaves the old content and no temporary file."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o666 & ~umask())
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError) and err.filename is None and err.errno is not None:
            raise OSError(err.errno, err.strerror, str(path)) from None
        raise


def check_writable(folder: Path) -> None:
    """An OSError where a file cannot be written into `folder` (made if missing): asked before
    long work whose result would go there."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fd, probe = tempfile.mkstemp(dir=folder, prefix=".probe.", suffix=".tmp")
    os.close(fd)
    os.unlink(probe)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def atomic_save_npz(path: Path, **arrays: np.ndarray) -> None:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    atomic_write_bytes(path, buf.getvalue())


def torch_bytes(obj: Any) -> bytes:
    """`obj` as `torch.save` writes it."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def atomic_torch_save(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, torch_bytes(obj))


class BackgroundWrites:
    """Atomic writes of bytes made in one background thread, so that a slow disk's write and
    fsync overlap the work that follows (a run's checkpoint and history, each epoch). `write`
    takes files that are written in the order given, after those of the write before it, which
    it waits for (at most one write is in flight); `wait` blocks until the last one is on disk,
    and raises its error, if any."""

    def __init__(self) -> None:
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="atomic-write")
        self._pending: Future | None = None

    def write(self, *files: tuple[Path, bytes]) -> None:
        self.wait()
        self._pending = self._thread.submit(write_in_order, files)

    def wait(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def close(self) -> None:
        try:
            self.wait()
        finally:
            self._thread.shutdown()


def write_in_order(files: tuple[tuple[Path, bytes], ...]) -> None:
    for path, data in files:
        atomic_write_bytes(path, data)


@contextmanager
def background_writes() -> Iterator[BackgroundWrites]:
    """A `BackgroundWrites` whose last write is on disk when the block ends, however it ends:
    an error or an interrupt never leaves a write half-done behind it."""
    writes = BackgroundWrites()
    try:
        yield writes
    finally:
        writes.close()
