"""Whether a run's data is where its name points, checked before torch is imported: a missing
`folder:`, features file or official data set is refused in about a second, not after the
seconds (17-20 s on a loaded machine) that torch, scikit-learn and the data loaders take to
import (issue 69, item 9). The same checks as the readers', called earlier: the readers (pandas,
scipy) are imported here only for a data set that is read from its official layout."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.data.names import FEATURES_PREFIX, FOLDER_PREFIX, READER_NAMES, is_emoji

# name -> module:function of its reader, imported only when read (`reader`), so that the
# presence check imports no torch; bench.data.datasets.READERS is made from it.
READER_FUNCTIONS = {name: f"bench.data.sources.{name}:read_{name}" for name in READER_NAMES}


def default_data_root() -> Path:
    """$NNGK_DATA, else ~/data: where the data sets are read (bench.data.datasets takes it
    from here, so that this module needs none of its imports)."""
    return Path(os.environ.get("NNGK_DATA", Path.home() / "data"))


def check_data_present(dataset: str, data_root: str | Path | None = None) -> None:
    """A one-line ValueError where the data set's folder, file or official layout is not there
    (the reader's own error), or the emoji sets are not installed (the one line that prints
    their install command). digits and glyphs are always there."""
    if dataset.startswith(FOLDER_PREFIX):
        from bench.data.sources.folder import folder_root

        folder_root(Path(dataset.removeprefix(FOLDER_PREFIX)))
    elif dataset.startswith(FEATURES_PREFIX):
        from bench.data.feature_files import check_features_file

        check_features_file(Path(dataset.removeprefix(FEATURES_PREFIX)))
    elif is_emoji(dataset):  # the packages' versions: a few small files, no image read
        from bench.data.emoji import EmojiSpec, set_versions

        root = Path(data_root) if data_root else default_data_root()
        check_root_folder(root)
        set_versions(root, EmojiSpec.parse(dataset).set_names())
    elif dataset in READER_FUNCTIONS:
        check_root_folder(Path(data_root) if data_root else default_data_root())
        # The whole table is read (a few thousand lines for most sets): the readers check
        # their layouts file by file as they read, and the run reads it again for its identity.
        reader(dataset)(Path(data_root) if data_root else default_data_root())


def reader(name: str) -> Callable[[Path], Any]:
    """The reader of a data set read from its official layout (`READER_FUNCTIONS`), imported
    when asked for: the readers' modules import pandas and scipy."""
    module, function = READER_FUNCTIONS[name].split(":")
    return getattr(importlib.import_module(module), function)


def check_root_folder(root: Path) -> None:
    """A one-line ValueError where the data root is a file (or lies under one): the data sets
    and the emoji packages are folders under it, which no install could make there."""
    root = root.expanduser()
    file = next((p for p in (root, *root.parents) if p.exists() and not p.is_dir()), None)
    if file is not None:
        raise ValueError(
            f"the data root {root} is {'a file' if file == root else f'under the file {file}'}, "
            "not a folder; give --data-root (or $NNGK_DATA) a folder"
        )
