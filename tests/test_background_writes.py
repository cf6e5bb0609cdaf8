"""Checkpoints written in the background (issue 44: a slow disk's write and fsync each epoch sat
between the GPU's epochs): in order, one at a time, each whole, every error raised, and the
last one on disk before the run is marked done, however its block ends."""

import threading
import time

import pytest
import torch

import bench.util.atomic as atomic
from bench.util.atomic import BackgroundWrites, background_writes
from tests.conftest import FAST, cli


@pytest.fixture
def slow_writes(monkeypatch):
    """atomic_write_bytes taking 50 ms; the record of (path, data) in the order written, and
    the most writes ever in flight at once."""
    real = atomic.atomic_write_bytes
    record = {"written": [], "in_flight": 0, "most": 0}
    lock = threading.Lock()

    def slow(path, data):
        with lock:
            record["in_flight"] += 1
            record["most"] = max(record["most"], record["in_flight"])
        time.sleep(0.05)
        real(path, data)
        with lock:
            record["in_flight"] -= 1
            record["written"].append((path.name, data))

    monkeypatch.setattr(atomic, "atomic_write_bytes", slow)
    return record


def test_writes_land_in_order_one_at_a_time(tmp_path, slow_writes):
    writes = BackgroundWrites()
    start = time.perf_counter()
    writes.write((tmp_path / "a", b"1"))
    assert time.perf_counter() - start < 0.04  # the caller goes on while it writes
    writes.write((tmp_path / "b", b"2"), (tmp_path / "a", b"3"))  # in the order given
    writes.write((tmp_path / "b", b"4"))
    writes.wait()
    assert slow_writes["written"] == [("a", b"1"), ("b", b"2"), ("a", b"3"), ("b", b"4")]
    assert slow_writes["most"] == 1
    assert (tmp_path / "a").read_bytes() == b"3" and (tmp_path / "b").read_bytes() == b"4"
    writes.close()


def test_a_failed_write_is_raised_once_by_the_next_wait(tmp_path):
    writes = BackgroundWrites()
    writes.write((tmp_path / "\0bad", b"1"), (tmp_path / "after", b"1"))  # ValueError
    with pytest.raises(ValueError):
        writes.wait()
    assert not (tmp_path / "after").exists()  # what followed the failed file is not written
    writes.wait()  # raised once, then nothing is pending
    writes.write((tmp_path / "ok", b"2"))
    writes.close()
    assert (tmp_path / "ok").read_bytes() == b"2"


def test_the_block_leaves_its_last_write_whole_when_it_fails(tmp_path, slow_writes):
    with pytest.raises(KeyboardInterrupt), background_writes() as writes:
        writes.write((tmp_path / "checkpoint.pt", b"x" * 1_000_000))
        raise KeyboardInterrupt  # an interrupt right after the epoch's checkpoint
    assert (tmp_path / "checkpoint.pt").read_bytes() == b"x" * 1_000_000
    assert not list(tmp_path.glob("*.tmp"))


def test_a_run_writes_each_epochs_checkpoint_in_the_background(tmp_path, monkeypatch):
    written = []
    real = BackgroundWrites.write

    def write(self, *files):
        written.append([path.name for path, _ in files])
        real(self, *files)

    monkeypatch.setattr(BackgroundWrites, "write", write)
    args = ["run", "--loss", "softmax", *FAST, "--epochs", "3", "--results", tmp_path]
    assert cli(*args).exit_code == 0
    # Each epoch's checkpoint, then its history: a history on disk never runs ahead of the
    # checkpoint a resumed run starts from (tests/test_cli.py kills a run by its history).
    assert written == [["checkpoint.pt", "history.csv"]] * 3
    (run,) = [p for p in tmp_path.iterdir() if "-softmax-" in p.name]
    state = torch.load(run / "checkpoint.pt", weights_only=True)
    assert state["progress"]["epoch"] == 3 and len(state["progress"]["history"]) == 3
