"""The files a report wrote into its folder, with a hash of each: a later report overwrites or
removes only its own files as it left them, never a file it did not write or one changed since.

A report that is killed (or meets a full disk) at any point is completed by the next one: before
it replaces or removes a file, the manifest lists both the file's old and its new content
(`publish`), so that whichever of the two the file holds, the next report knows it as its own.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

from bench.util.atomic import atomic_write_bytes

MANIFEST = ".nngk-report.json"
Manifest = dict[str, set[str]]  # file name -> the hashes it may hold as a report's file


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_manifest(out: Path) -> Manifest:
    """What the last report wrote into `out` ({} for none or damaged); an entry of an earlier
    version is one hash, of this one a list."""
    try:
        files = json.loads((Path(out) / MANIFEST).read_text()).get("files", {})
    except (OSError, ValueError, AttributeError):
        return {}
    if not isinstance(files, dict):
        return {}
    return {str(k): {v} if isinstance(v, str) else set(map(str, v)) for k, v in files.items()}


def ours(path: Path, manifest: Mapping[str, set[str]]) -> bool:
    """Whether the report may write `path`: it does not exist, or is a report's file unchanged."""
    if not path.exists():
        return True
    return path.is_file() and digest(path.read_bytes()) in manifest.get(path.name, set())


def write_manifest(out: Path, files: Mapping[str, set[str]]) -> None:
    entries = {name: sorted(hashes) for name, hashes in sorted(files.items())}
    text = json.dumps({"files": entries}, indent=2, sort_keys=True) + "\n"
    atomic_write_bytes(Path(out) / MANIFEST, text.encode())


def remove_temporaries(out: Path, names: set[str]) -> None:
    """What a killed atomic write of one of these files left behind."""
    for name in names:
        for tmp in Path(out).glob(f".{name}.*.tmp"):
            tmp.unlink(missing_ok=True)


def publish(
    out: Path, files: Mapping[str, bytes], previous: Manifest, remove_stale: bool = True
) -> tuple[list, list]:
    """Write `files` into `out` and remove the earlier report's files this one does not write
    (a table whose runs are gone), never touching a file that is not a report's or was changed
    since; without `remove_stale` (a part of this report failed) they stay, still the
    report's. Returns (written names, removed names); the manifest then lists exactly the
    report's files in `out`."""
    out = Path(out)
    remove_temporaries(out, set(previous) | set(files))
    mine = {name: data for name, data in files.items() if ours(out / name, previous)}
    stale = [n for n in sorted(set(previous) - set(files)) if (out / n).exists()]
    stale = [n for n in stale if ours(out / n, previous)]
    kept = {} if remove_stale else {n: previous[n] for n in stale}
    stale = stale if remove_stale else []
    pending = {name: set(hashes) for name, hashes in previous.items()}
    for name, data in mine.items():
        pending.setdefault(name, set()).add(digest(data))
    write_manifest(out, pending)  # from here on, old and new content are both known
    for name, data in mine.items():
        atomic_write_bytes(out / name, data)
    for name in stale:
        (out / name).unlink()
    write_manifest(out, {**kept, **{name: {digest(data)} for name, data in mine.items()}})
    return sorted(mine), stale
