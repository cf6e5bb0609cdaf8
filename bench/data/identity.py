"""Where a run's data lies and a fingerprint of it, so that a run on other data is another run.

The built-in sets (digits, glyphs) are fully named by their name; an emoji set by its name, its
sets' versions and the renderer's (not where the packages lie). An image data set is
identified by its resolved folder and by its image table (path, label, split, box) with every
file's size and modification time: replacing, adding or relabelling an image changes it. A
features file is identified by its resolved path, size and modification time.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd

from bench.data.datasets import default_data_root, read_table
from bench.data.emoji import EmojiSpec
from bench.data.emoji_render import emoji_fingerprint
from bench.data.glyphs import GlyphSpec
from bench.data.image_cache import file_stats
from bench.data.names import FEATURES_PREFIX, is_emoji, is_glyphs

TABLE_COLUMNS = ("path", "label", "split", "x1", "y1", "x2", "y2")


def table_fingerprint(table: pd.DataFrame) -> str:
    """A digest of an image table and of its files' sizes and modification times."""
    columns = [c for c in TABLE_COLUMNS if c in table]
    rows = table[columns].astype(str).to_numpy().tolist()
    stats = file_stats(table["path"].tolist())
    text = json.dumps({"columns": columns, "rows": rows, "stats": stats})
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def features_identity(name: str) -> dict[str, str]:
    path = Path(name[len(FEATURES_PREFIX) :]).expanduser().resolve()
    size, mtime = file_stats([str(path)])[0]
    digest = hashlib.sha1(f"{size}:{mtime}".encode()).hexdigest()[:16]
    return {"data_location": str(path), "data_fingerprint": digest}


def data_identity(dataset: str, data_root: str) -> dict[str, str]:
    """{"data_location", "data_fingerprint"}: both "" for the built-in sets."""
    if dataset == "digits" or is_glyphs(dataset):
        return {"data_location": "", "data_fingerprint": ""}
    if dataset.startswith(FEATURES_PREFIX):
        return features_identity(dataset)
    if is_emoji(dataset):
        # The sets' versions and the rendering name the images wherever the packages lie: the
        # same run id and table on every machine (CI's regression check reads its baseline so).
        root = Path(data_root) if data_root else default_data_root()
        return {
            "data_location": "",
            "data_fingerprint": emoji_fingerprint(EmojiSpec.parse(dataset), root),
        }
    table, root = read_table(dataset, Path(data_root) if data_root else default_data_root())
    return {
        "data_location": str(Path(root).expanduser().resolve()),
        "data_fingerprint": table_fingerprint(table),
    }


def canonical_dataset(name: str) -> str:
    """A built-in set's one name: its parameters at their defaults dropped, the rest sorted
    ('glyphs:size=28,classes=20' and 'glyphs:classes=20' are 'glyphs:classes=20';
    'emoji:size=16,classes=30,sets=all' is 'emoji:classes=30,size=16'), so that one set is
    one run id and one table however it was spelt. Names already so written (every name this
    project's runs and reports use) are unchanged; any other data set's name as given."""
    if is_glyphs(name):
        spec = GlyphSpec.parse(name)
    elif is_emoji(name):
        spec = EmojiSpec.parse(name)
    else:
        return name
    head, _, args = spec.name().partition(":")
    return ":".join([head, ",".join(sorted(args.split(",")))]) if args else head
