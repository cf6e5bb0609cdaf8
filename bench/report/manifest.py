"""The files a report wrote into its folder, with a hash of each: a later report overwrites or
removes only its own files as it left them, never a file it did not write or one changed since."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from bench.util.atomic import atomic_write_json

MANIFEST = ".nngk-report.json"


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_manifest(out: Path) -> dict[str, str]:
    """File name -> hash of what the last report wrote into `out` ({} for none or damaged)."""
    try:
        files = json.loads((Path(out) / MANIFEST).read_text()).get("files", {})
    except (OSError, ValueError, AttributeError):
        return {}
    return {str(k): str(v) for k, v in files.items()} if isinstance(files, dict) else {}


def ours(path: Path, manifest: Mapping[str, str]) -> bool:
    """Whether the report may write `path`: it does not exist, or is a report's file unchanged."""
    if not path.exists():
        return True
    return path.is_file() and manifest.get(path.name) == digest(path.read_bytes())


def write_manifest(out: Path, written: Mapping[str, bytes]) -> None:
    files = {name: digest(data) for name, data in sorted(written.items())}
    atomic_write_json(Path(out) / MANIFEST, {"files": files})


def remove_stale(out: Path, previous: Mapping[str, str], written: Sequence[Path]) -> list[Path]:
    """Remove what an earlier report wrote, left unchanged, and this one did not write (a table
    whose runs are gone), so that `out` holds one report; anything else is left alone."""
    now = {p.name for p in written}
    stale = [Path(out) / name for name in sorted(set(previous) - now)]
    stale = [path for path in stale if path.exists() and ours(path, previous)]
    for path in stale:
        path.unlink()
    return stale
