"""The image cache's build: each thread writes the images it decodes into the file, the build
logs where its seconds went, and it decodes on the CPUs the process may use."""

import errno
import logging
import os

import numpy as np
import pytest

import bench.data.cache_times as cache_times
import bench.data.image_cache as images
from bench.data.cache_times import CacheTimes, usable_cpus
from bench.data.image_cache import build_cache, load_image
from tests.test_image_faults import pictures
from tests.test_protocols import cached


@pytest.mark.parametrize("workers", [1, 3])
def test_every_image_lands_in_its_place_whatever_thread_wrote_it(tmp_path, workers):
    paths = pictures(tmp_path / "img", n=9, size=20) + pictures(tmp_path / "wide", n=3, size=30)
    cache = build_cache(paths, None, 8, tmp_path / "cache", workers=workers)
    assert all(
        np.array_equal(pixels, load_image(path, None, 8))
        for path, pixels in zip(paths, cached(cache, len(paths)), strict=True)
    )


def test_a_write_cut_short_goes_on_where_it_stopped(tmp_path, monkeypatch):
    """os.pwrite may write fewer bytes than it is given: the rest follows at its offset."""
    paths = pictures(tmp_path / "img")
    real = os.pwrite
    monkeypatch.setattr(images.os, "pwrite", lambda fd, data, at: real(fd, data[:5], at))
    cache = build_cache(paths, None, 8, tmp_path / "cache", workers=2)
    assert all(
        np.array_equal(pixels, load_image(path, None, 8))
        for path, pixels in zip(paths, cached(cache, 4), strict=True)
    )


@pytest.mark.parametrize("written", ["raises", "nothing"])
def test_a_disk_that_fills_while_writing_is_an_oserror_and_leaves_no_part(
    tmp_path, monkeypatch, written
):
    def full(fd, data, at):
        if written == "raises":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return 0

    monkeypatch.setattr(images.os, "pwrite", full)
    with pytest.raises(OSError) as err:
        build_cache(pictures(tmp_path / "img"), None, 8, tmp_path / "cache", workers=2)
    assert err.value.errno == errno.ENOSPC and err.value.filename.endswith(".tmp.npy")
    assert list((tmp_path / "cache").iterdir()) == []


def test_images_that_decode_to_another_shape_than_their_header_are_named_together(
    tmp_path, monkeypatch
):
    paths = pictures(tmp_path / "img")
    real = images.load_image

    def lying(path, box, size):
        pixels = real(path, box, size)
        return pixels[:-1] if path in paths[1:3] else pixels

    monkeypatch.setattr(images, "load_image", lying)
    with pytest.raises(ValueError) as err:
        build_cache(paths, None, 8, tmp_path / "cache", workers=2)
    assert str(err.value) == (
        f"{paths[1]}: decoded as (7, 8), its header says (8, 8); replace or remove it "
        f"(1 more cannot be read either: {paths[2]})"
    )
    assert list((tmp_path / "cache").iterdir()) == []


def test_the_build_logs_its_seconds_part_by_part_and_its_threads(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(images, "usable_cpus", lambda: 3)
    with caplog.at_level(logging.INFO, logger="nngk-bench"):
        build_cache(pictures(tmp_path / "img"), None, 8, tmp_path / "cache")
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("cached ")]
    assert line.startswith("cached 4 images at 8px (0.00 GiB) in ")
    parts = ("reading headers and reserving space", "decoding and writing", "flushing to disk")
    assert f" s on 3 threads: {parts[0]} " in line
    assert all(f", {part} " in line for part in parts[1:])
    assert line.endswith(" s") and "; summed over the threads: writing " in line


def test_the_seconds_are_laps_in_order_and_the_threads_are_summed(monkeypatch):
    clock = iter([10.0, 10.5, 12.0, 12.25, 13.0])
    monkeypatch.setattr(cache_times.time, "perf_counter", lambda: next(clock))
    times = CacheTimes(4)  # started at 10.0
    times.lap("headers")  # 10.5
    times.lap("decoding")  # 12.0
    times.lap("headers")  # 12.25: a part's laps add up
    times.add("writing", 0.75)
    times.add("writing", 0.5)
    times.lap("flushing")  # 13.0
    assert times.seconds == {"headers": 0.75, "decoding": 1.5, "flushing": 0.75}
    assert times.line(10, 8, 3 * 2**29) == (
        "cached 10 images at 8px (1.50 GiB) in 3.0 s on 4 threads: headers 0.8 s, "
        "decoding 1.5 s, flushing 0.8 s; summed over the threads: writing 1.2 s"
    )


def test_the_cpus_are_the_processes_own_where_the_system_says_them(monkeypatch):
    monkeypatch.setattr(cache_times.os, "sched_getaffinity", lambda pid: {0, 5, 7}, raising=False)
    monkeypatch.setattr(cache_times.os, "cpu_count", lambda: 64)
    assert usable_cpus() == 3
    monkeypatch.delattr(cache_times.os, "sched_getaffinity")
    assert usable_cpus() == 64
    monkeypatch.setattr(cache_times.os, "cpu_count", lambda: None)
    assert usable_cpus() == 1
