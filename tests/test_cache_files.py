"""The glyphs and emoji caches are written whole or not at all (bench.data.glyphs.whole_file)."""

import errno

import numpy as np
import pytest

from bench.data import glyphs as G
from bench.data.emoji_render import EmojiSet
from bench.data.emoji_render import write_cache as write_emoji
from bench.data.glyphs import GlyphSpec, whole_file

SMALL = GlyphSpec.parse("glyphs:classes=4,instances=2,size=8")


def full_disk(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def tiny_emoji() -> EmojiSet:
    return EmojiSet(
        images=np.zeros((2, 8, 8, 3), np.uint8),
        labels=np.array([0, 1]),
        sets=np.array([0, 0]),
        class_names=("a", "b"),
        set_names=("twemoji",),
        versions=("1.0.0",),
        licences=("CC-BY 4.0",),
    )


def test_a_glyphs_cache_that_fails_midway_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.setattr(G, "class_images", full_disk)
    with pytest.raises(OSError, match="No space"):
        G.write_cache(tmp_path / "glyphs-x.npz", SMALL)
    assert list(tmp_path.iterdir()) == []


def test_an_emoji_cache_that_fails_midway_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.setattr(np, "savez", full_disk)
    with pytest.raises(OSError, match="No space"):
        write_emoji(tmp_path / "emoji-x.npz", tiny_emoji())
    assert list(tmp_path.iterdir()) == []


def test_a_whole_cache_is_renamed_into_place_and_dead_writers_parts_removed(tmp_path):
    dead = tmp_path / ".glyphs-old.999999999.tmp.npz"  # no process has this id
    dead.write_bytes(b"half")
    G.write_cache(tmp_path / "glyphs-x.npz", SMALL)
    write_emoji(tmp_path / "emoji-x.npz", tiny_emoji())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["emoji-x.npz", "glyphs-x.npz"]
    images, labels = G.read_cache(tmp_path / "glyphs-x.npz", SMALL)
    assert np.array_equal(images, G.generate(SMALL)[0]) and labels.tolist() == [
        0,
        0,
        1,
        1,
        2,
        2,
        3,
        3,
    ]
    with np.load(tmp_path / "emoji-x.npz") as saved:
        assert saved["labels"].tolist() == [0, 1]


def test_the_block_s_failure_is_raised_as_it_is(tmp_path):
    with pytest.raises(KeyError), whole_file(tmp_path / "x.npz", "x") as f:
        f.write(b"partial")
        raise KeyError("interrupted")
    assert list(tmp_path.iterdir()) == []
