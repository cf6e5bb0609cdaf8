"""Faults of image data: corrupt files, huge images, a stale or broken cache, a full disk."""

import errno
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image
from torchvision.transforms.v2 import functional as F

import bench.data.image_cache as images
from bench.cli import main
from bench.data.crops import Crops
from bench.data.image_cache import build_cache, load_image, sizes_path
from bench.data.images import CachedImages
from tests.fixtures.folder import class_image, make_folder
from tests.test_protocols import FAST, cached


def pictures(folder, n=4, size=20):
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        path = folder / f"{i}.png"
        class_image(i, i, size).save(path)
        paths.append(str(path))
    return paths


def one_error_line(out) -> str:
    assert out.exit_code != 0
    assert "Traceback" not in out.output, out.output
    lines = [line for line in out.output.strip().splitlines() if line.startswith("Error: ")]
    assert len(lines) == 1, out.output
    return lines[0]


def run_folder(root, results):
    args = ["run", "--loss", "softmax", "--dataset", f"folder:{root}", *FAST]
    return CliRunner().invoke(main, [*args, "--results", str(results)])


def test_a_truncated_jpeg_is_one_line_naming_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("NNGK_CACHE", str(tmp_path / "cache"))
    root = make_folder(tmp_path, classes=4, per_class=8)
    victim = root / "birch" / "birch_0.jpg"
    victim.write_bytes(victim.read_bytes()[:200])
    line = one_error_line(run_folder(root, tmp_path / "r"))
    assert str(victim) in line and "cannot decode" in line
    assert not list((tmp_path / "cache").glob(".*tmp.npy"))  # the failed build cleaned up
    runs = [p for p in (tmp_path / "r").iterdir()] if (tmp_path / "r").exists() else []
    assert not any((p / "metrics.json").exists() for p in runs)


def test_an_image_over_the_decompression_bomb_limit_says_how_to_allow_it(tmp_path, monkeypatch):
    (path,) = pictures(tmp_path / "big", n=1, size=64)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 64 * 64 // 4)  # 4x over: Pillow's error
    with pytest.raises(ValueError) as err:
        load_image(path, None, 8)
    assert str(path) in str(err.value) and images.MAX_PIXELS_VARIABLE in str(err.value)
    monkeypatch.setenv(images.MAX_PIXELS_VARIABLE, "0")
    images.allow_large_images()
    assert Image.MAX_IMAGE_PIXELS is None
    assert load_image(path, None, 8).shape == (8, 8, 3)


def test_a_replaced_image_gets_a_new_cache(tmp_path):
    paths = pictures(tmp_path / "img")
    first = build_cache(paths, None, 8, tmp_path / "cache", workers=1)
    class_image(9, 9, 20).save(paths[1])
    os.utime(paths[1], ns=(1, 1))
    second = build_cache(paths, None, 8, tmp_path / "cache", workers=1)
    assert second != first
    assert np.array_equal(cached(second, 4)[1], load_image(paths[1], None, 8))


def test_a_box_outside_its_image_is_said_and_the_image_taken_whole(tmp_path, caplog):
    paths = pictures(tmp_path / "img")
    boxes = [[0, 0, 4, 4], [100, 100, 120, 130], None, [2, 1, 8, 8]]  # the 2nd lies outside
    cache = build_cache(paths, boxes, 8, tmp_path / "cache", workers=1)
    assert np.array_equal(cached(cache, 4)[1], load_image(paths[1], None, 8))
    assert "1 image(s) have a bounding box with no area inside the image" in caplog.text
    assert f"{paths[1]}: box (100, 100, 120, 130)" in caplog.text


@pytest.mark.parametrize("damage", ["truncated", "other shape", "no sizes"])
def test_a_broken_cache_is_rebuilt(tmp_path, damage, caplog):
    paths = pictures(tmp_path / "img")
    cache = build_cache(paths, None, 8, tmp_path / "cache", workers=1)
    expected = cached(cache, 4)
    if damage == "truncated":
        cache.write_bytes(cache.read_bytes()[:300])
    elif damage == "other shape":
        np.save(sizes_path(cache), np.full((4, 2), 9))
    else:
        sizes_path(cache).unlink()
    assert build_cache(paths, None, 8, tmp_path / "cache", workers=1) == cache
    assert all(np.array_equal(a, b) for a, b in zip(cached(cache, 4), expected, strict=True))
    assert "rebuilding" in caplog.text


def test_a_full_disk_while_caching_is_an_oserror_and_leaves_no_part(tmp_path, monkeypatch):
    paths = pictures(tmp_path / "img")

    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(OSError) as err:
        build_cache(paths, None, 8, tmp_path / "cache", workers=1)
    assert err.value.errno == errno.ENOSPC and err.value.filename
    assert list((tmp_path / "cache").iterdir()) == []


def test_parts_of_dead_builds_are_removed_and_live_ones_kept(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    dead = cache / ".images-8-abc.999999999.tmp.npy"  # no such process
    live = cache / f".images-8-abc.{os.getpid()}.tmp.npy"
    dead.write_bytes(b"x")
    live.write_bytes(b"x")
    build_cache(pictures(tmp_path / "img"), None, 8, cache, workers=1)
    assert not dead.exists() and live.exists()


def test_a_build_killed_between_its_two_files_is_never_read_as_whole(tmp_path):
    """The sizes are renamed into place first: pixels without them fail validation."""
    paths = pictures(tmp_path / "img")
    cache = build_cache(paths, None, 8, tmp_path / "cache", workers=1)
    assert images.valid_cache(cache, 4, 8)
    cache.unlink()  # as if killed after the sizes' rename
    assert not images.valid_cache(cache, 4, 8)
    assert not images.valid_cache(sizes_path(cache), 4, 8)


def strips(folder, shapes):
    """Noise images of these (height, width) shapes, as PNG files."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    paths = []
    for i, (h, w) in enumerate(shapes):
        paths.append(str(folder / f"{i}.png"))
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(paths[-1])
    return paths


EXTREME = [(10, 1000), (1000, 10), (1, 200), (30, 40)]  # (height, width) as on disk


@pytest.mark.parametrize("mode", ["squash", "aspect"])
def test_a_batch_of_extreme_aspect_ratios_is_bounded_by_the_batch_and_resize(tmp_path, mode):
    """Issue 22: cached with the shorter side 16, these were 16x1600, 1600x16 and 16x3200, and
    their batch a 1600x3200 canvas per image; now at most 16 x 64 (MAX_ASPECT 4) per image."""
    resize, crop = 16, 12
    cache = build_cache(strips(tmp_path / "img", EXTREME), None, resize, tmp_path / "c", workers=1)
    n = len(EXTREME)
    data = CachedImages(cache, np.arange(n), np.arange(n), Crops(crop, resize, mode))
    assert [tuple(data.image(i).shape[:2]) for i in range(n)] == [
        (1, 64),  # 10x1000: the longer side capped at 4 x 16, the shorter 10 * 64 / 1000 rounded
        (64, 1),
        (1, 64),
        (16, 21),  # an ordinary image as before: the shorter side 16
    ]
    batch, _, _ = data.collate([data[i] for i in range(n)])
    assert batch.pixels.shape == (n, 3, resize, images.MAX_ASPECT * resize)
    assert batch.pixels.numel() <= n * 3 * resize * images.MAX_ASPECT * resize
    for train in (False, True):
        crops = Crops(crop, resize, mode, train=train)
        out = crops(batch, torch.Generator().manual_seed(0))
        assert out.shape == (n, 3, crop, crop) and torch.isfinite(out).all()
    assert data.inputs(side=8).shape == (n, 3 * 8 * 8)  # the raw baseline: one square each


def test_the_cap_is_torchvisions_resize_max_size_up_to_rounding():
    for w, h in [(1000, 20), (20, 1000), (40, 30), (64, 16), (65, 16), (16, 100), (17, 80)]:
        ours = images.resized_size((w, h), 16)
        height, width = F.resize(torch.zeros(1, h, w), 16, max_size=64).shape[1:]
        assert all(abs(a - b) <= 1 for a, b in zip(ours, (width, height), strict=True))
        assert min(ours) <= 16 and max(ours) <= 64
    # where torchvision's shorter side would be 0 pixels (it fails), ours is 1
    assert images.resized_size((200, 1), 16) == (64, 1)
    assert images.resized_size((1, 5000), 16) == (1, 64)


def test_a_cache_of_the_format_without_the_cap_is_not_read(tmp_path, monkeypatch):
    paths = strips(tmp_path / "img", EXTREME)
    monkeypatch.setattr(images, "MAX_ASPECT", 1000)
    monkeypatch.setattr(images, "CACHE_FORMAT", 2)
    old = build_cache(paths, None, 8, tmp_path / "cache", workers=1)
    assert cached(old, 4)[2].shape == (8, 1600, 3)
    monkeypatch.undo()
    new = build_cache(paths, None, 8, tmp_path / "cache", workers=1)
    assert new != old and cached(new, 4)[2].shape == (1, 32, 3)
    assert not images.valid_cache(old, 4, 8)  # nor would it pass as a cache of the new format


def test_a_broken_link_among_the_images_is_named_as_a_link(tmp_path):
    from bench.data.image_cache import file_stats

    (tmp_path / "gone.jpg").symlink_to(tmp_path / "elsewhere.jpg")
    said = r"gone.jpg: No such file or directory \(a link to .*elsewhere.jpg\); the data set"
    with pytest.raises(ValueError, match=said + " holds it: restore it or remove it"):
        file_stats([str(tmp_path / "gone.jpg")])


def test_every_image_that_cannot_be_read_is_named_in_one_build(tmp_path):
    # Before: each build stopped at the first bad file and threw its work away; a folder of
    # four bad files took four builds to learn of them.
    paths = pictures(tmp_path / "img", n=6)
    Path(paths[0]).write_bytes(b"")  # empty: its header cannot be read
    Path(paths[1]).write_text("not an image")
    with pytest.raises(ValueError) as err:
        build_cache(paths, None, 8, tmp_path / "cache", workers=1)
    assert str(err.value).startswith(f"{paths[0]}: cannot decode the image")
    assert f"(1 more cannot be read either: {paths[1]})" in str(err.value)
    for path in paths[2:5]:  # whole headers, truncated data: found in the decoding pass
        Path(path).write_bytes(Path(path).read_bytes()[:100])
    with pytest.raises(ValueError) as err:
        build_cache(paths[2:], None, 8, tmp_path / "cache", workers=2)
    assert str(err.value).startswith(f"{paths[2]}: cannot decode the image")
    assert f"(2 more cannot be read either: {paths[3]}, {paths[4]})" in str(err.value)
    assert not list((tmp_path / "cache").glob(".*tmp.npy"))  # the failed builds cleaned up
