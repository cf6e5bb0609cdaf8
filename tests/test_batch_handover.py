"""A batch of cached images crosses from a loader's worker as two tensors (the pixels, and one
holding the labels, indices and sizes), not five: each costs the receiving thread a socket
handshake for its file descriptor. It arrives as collated in the worker."""

import numpy as np
import pytest
import torch
from PIL import Image
from torch.multiprocessing import reductions

from bench.data.crops import Crops
from bench.data.image_cache import build_cache
from bench.data.images import CachedImages, pad_batch
from bench.util.batches import split_loader

SHAPES = [(30, 40), (50, 20), (24, 24), (40, 36), (20, 44), (36, 30)]  # portrait ones too


@pytest.fixture(scope="module")
def cached(tmp_path_factory) -> CachedImages:
    folder = tmp_path_factory.mktemp("handover")
    rng = np.random.default_rng(0)
    paths = []
    for i, (h, w) in enumerate(SHAPES):
        paths.append(str(folder / f"{i}.png"))
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(paths[-1])
    cache = build_cache(paths, None, 20, folder / "cache", workers=1)
    labels = np.array([7, 3, 3, 9, 1, 7])
    return CachedImages(cache, np.arange(len(SHAPES)), labels, Crops(16, 20, "squash"))


def test_labels_indices_and_sizes_are_views_of_one_tensor(cached):
    items = [cached[i] for i in (4, 1, 0, 5)]
    batch, labels, indices = cached.collate(items)
    padded = pad_batch([img for img, _, _ in items])
    assert torch.equal(batch.pixels, padded.pixels) and torch.equal(batch.sizes, padded.sizes)
    assert batch.transposed.tolist() == [False, True, False, True]  # 20x26 and 26x20 as cached
    assert labels.tolist() == [1, 3, 7, 7] and indices.tolist() == [4, 1, 0, 5]
    storage = labels.untyped_storage().data_ptr()
    for part in (batch.sizes, labels, indices):  # contiguous: each pinned and copied as it is
        assert part.is_contiguous() and part.dtype == torch.int64
        assert part.untyped_storage().data_ptr() == storage


def test_a_workers_batch_crosses_as_two_tensors_and_arrives_whole(cached, monkeypatch):
    rebuilt = []
    rebuild = reductions.rebuild_storage_fd

    def counting(*args):
        rebuilt.append(1)
        return rebuild(*args)

    loader = split_loader(cached, torch.device("cpu"), 1, batch_size=3, shuffle=False, timeout=60)
    batches = iter(loader)  # the worker starts: it pickles with the function as it was
    # The main process unpickles what the worker sends, and looks this up by name to do it.
    monkeypatch.setattr(reductions, "rebuild_storage_fd", counting)
    batches = list(batches)
    assert len(rebuilt) == 2 * len(batches) == 4
    in_process = list(split_loader(cached, torch.device("cpu"), 0, batch_size=3, shuffle=False))
    for (batch, labels, idx), (want, want_labels, want_idx) in zip(
        batches, in_process, strict=True
    ):
        assert torch.equal(batch.pixels, want.pixels) and torch.equal(batch.sizes, want.sizes)
        assert torch.equal(labels, want_labels) and torch.equal(idx, want_idx)
    assert torch.cat([idx for _, _, idx in batches]).tolist() == list(range(len(SHAPES)))
