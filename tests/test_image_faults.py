"""Faults of image data: corrupt files, huge images, a stale or broken cache, a full disk."""

import errno
import os

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

import bench.data.image_cache as images
from bench.cli import main
from bench.data.image_cache import build_cache, load_image, sizes_path
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
