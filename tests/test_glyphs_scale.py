"""A glyphs set is generated, cached and split without being held twice: chunks rendered into
the cache file, the cache memory-mapped, each split rows of it made float an item at a time."""

import pickle
import tracemalloc

import numpy as np
import pytest
import torch

from bench.data import glyphs as G
from bench.data.datasets import load_dataset
from bench.data.glyphs import GlyphSpec, generate, load_glyphs
from bench.data.tensor_sets import PixelImages, tensor_splits
from bench.models import embed as embed_module
from bench.models.small import SmallCNN

# 10,000 images of 8x8: 2.56 MB as float32, 0.64 MB as uint8.
MODERATE = "glyphs:classes=400,instances=25,size=8"
SMALL = "glyphs:classes=8,instances=5,size=12"


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NNGK_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def peak_bytes(work) -> int:
    """The peak of Python's and numpy's allocations while `work()` runs (torch's are not
    traced: render's distances are bounded by RENDER_CHUNK, not by the set)."""
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_generating_and_loading_hold_well_under_one_float_copy(monkeypatch):
    # What they hold is set by the chunk rendered and the block read at once, not by the set:
    # both made small here, so that a moderate set shows it.
    monkeypatch.setattr(G, "RENDER_CHUNK", 50)
    monkeypatch.setattr(G, "READ_BLOCK", 1 << 16)
    spec = GlyphSpec.parse(MODERATE)
    floats = spec.classes * spec.instances * spec.size**2 * 4
    generating = peak_bytes(lambda: load_glyphs(spec, say=lambda _: None))
    load_dataset(SMALL, "metric", 0.2)  # the first split imports and caches what it uses
    loaded = {}
    loading = peak_bytes(lambda: loaded.update(data=load_dataset(MODERATE, "metric", 0.2)))
    # The code before, measured so on this set: 18.7 x `floats` while generating (the whole set
    # rendered at once, in float64), 2.3 x while loading (float32 copies; torch's untraced).
    assert generating < floats / 3 and loading < floats / 3, (generating, loading, floats)
    data = loaded["data"]
    assert isinstance(data.train.images, np.memmap) and data.test.images is data.train.images
    assert len(data.train) + len(data.val) + len(data.test) == spec.classes * spec.instances


def test_splits_give_the_items_the_float_tensors_gave():
    # The path before: the set made float32 whole, each split a copy of its rows.
    data = load_dataset(SMALL, "metric", 0.2)
    pixels, labels = generate(GlyphSpec.parse(SMALL))
    floats = torch.from_numpy(pixels.astype(np.float32) / 255.0).unsqueeze(1)
    before = tensor_splits(SMALL, floats, labels, "metric", 0.2, 0, "images")
    assert data.in_channels == before.in_channels == 1
    for name in ("train", "train_eval", "val", "test"):
        split, old = getattr(data, name), getattr(before, name)
        assert isinstance(split, PixelImages) and len(split) == len(old)
        for i in range(len(split)):
            image, label, index = split[i]
            old_image, old_label, old_index = old[i]
            assert image.dtype == torch.float32 and torch.equal(image, old_image)
            assert (label, index) == (old_label, old_index)
        assert np.array_equal(split.inputs(), old.inputs())


def test_a_split_is_pickled_as_where_its_memory_map_lies():
    data = load_dataset(SMALL, "metric", 0.2)
    copied = pickle.loads(pickle.dumps(data.test))
    assert len(pickle.dumps(data.test)) < data.test.images.nbytes / 4  # its rows, not the set
    assert isinstance(copied.images, np.memmap)
    for i in (0, len(copied) // 2, len(copied) - 1):
        assert torch.equal(copied[i][0], data.test[i][0]) and copied[i][1] == data.test[i][1]


def test_a_large_set_shows_progress_from_the_start(monkeypatch, capsys):
    monkeypatch.setattr(G, "PROGRESS_FROM", 100)
    load_glyphs(GlyphSpec.parse("glyphs:classes=40,instances=5,size=8"), say=lambda _: None)
    bar = capsys.readouterr().err
    assert "generating glyphs:classes=40,instances=5,size=8:" in bar and "200/200" in bar
    assert "0/200" in bar  # drawn before the first chunk is rendered


def test_embedding_a_large_split_shows_its_progress(monkeypatch, capsys):
    split = load_dataset("glyphs:classes=20,instances=5,size=8").test
    model = SmallCNN(width=4)
    capsys.readouterr()  # what generating the set printed (a path holding this test's name)
    quiet, labels = embed_module.embed(model, split, torch.device("cpu"))
    assert "embedding:" not in capsys.readouterr().err  # one batch: too few for a bar
    monkeypatch.setattr(embed_module, "PROGRESS_FROM", 1)
    shown, _ = embed_module.embed(model, split, torch.device("cpu"))
    assert "embedding:   0%" in capsys.readouterr().err
    assert torch.equal(shown, quiet) and len(labels) == len(split)
