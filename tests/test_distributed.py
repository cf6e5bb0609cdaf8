"""One run on two processes (DistributedDataParallel on gloo, as `torchrun --nproc_per_node 2`
runs it): the same metrics as one process with the same global batch. With a GroupNorm
network nothing depends on how the batch is split, so the tolerance only allows for the order
of floating-point sums (measured: identical to 4 decimals for contrastive, NNGK and N-pair)."""

import json
import os
import signal
import subprocess
import sys
from contextlib import suppress
from pathlib import Path

import pytest
from torch.utils.data import BatchSampler, SequentialSampler

from bench.train.distributed import Ranks, RankSlices
from tests.conftest import cli, copy_baselines
from tests.test_dispatch_interrupt import processes_naming, until

TOLERANCE = 1e-3
TINY = "glyphs:classes=20,instances=12"


ARGS = ["--dataset", TINY, "--backbone", "small_cnn_gn", "--dims", "16", "--epochs", "2"]
ARGS += ["--batch-size", "16"]


def metrics_of(results, loss) -> dict:
    (folder,) = [p for p in results.iterdir() if f"-{loss}-" in p.name]
    return json.loads((folder / "metrics.json").read_text())


# NNGK: the general DDP path (gradients, sampler slices, validation) and its bank of every
# process's embeddings, gathered at each refresh. (Contrastive ran here too until the suite
# needed its 17 s back; it takes no step NNGK does not.)
@pytest.mark.parametrize("loss", ["nngk"])
def test_two_processes_train_the_run_one_process_trains(tmp_path, loss):
    # One process: this one (the command in-process, as `nngk-bench run` runs it).
    out = cli("run", "--loss", loss, *ARGS, "--results", tmp_path / "one")
    assert out.exit_code == 0, out.output
    one = metrics_of(tmp_path / "one", loss)
    # Two: the command started anew with --nproc 2 relaunches itself under torchrun. It finds
    # the data set's baselines finished (copied), which its first process alone would write.
    copy_baselines(tmp_path / "one", tmp_path / "two")
    command = [sys.executable, "-m", "bench.cli", "run", "--loss", loss, *ARGS, "--nproc", "2"]
    out = subprocess.run([*command, "--results", str(tmp_path / "two")], capture_output=True,
                         text=True, timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "on 2 processes" in out.stderr
    two = metrics_of(tmp_path / "two", loss)
    for key in ("recall@1", "map@r", "nmi", "train_loss_change", "val_score"):
        assert two[key] == pytest.approx(one[key], abs=TOLERANCE), key
    assert two["best_epoch"] == one["best_epoch"]
    assert (one["processes"], two["processes"]) == (1, 2)
    # --nproc is not in the run id: one process finds the run finished, and says on how many
    # it ran; the report's setup states it.
    out = cli("run", "--loss", loss, *ARGS, "--results", tmp_path / "two")
    assert "ran on 2 processes, not the 1 asked for" in out.output, out.output
    out = cli("report", "--results", tmp_path / "two", "--out", tmp_path / "report")
    assert out.exit_code == 0, out.output
    pages = "".join(page.read_text() for page in (tmp_path / "report").glob("*.md"))
    assert "; processes 2; 1 seed (0)." in pages


def test_each_process_takes_its_slice_of_every_global_batch():
    batches = BatchSampler(SequentialSampler(range(24)), batch_size=8, drop_last=True)
    slices = [list(RankSlices(batches, Ranks(rank, 2))) for rank in (0, 1)]
    assert [a + b for a, b in zip(*slices, strict=True)] == list(batches)
    assert slices[1][0] == [4, 5, 6, 7] and len(RankSlices(batches, Ranks(1, 2))) == 3


def test_a_batch_the_processes_cannot_share_is_a_one_line_error():
    batches = BatchSampler(SequentialSampler(range(30)), batch_size=10, drop_last=True)
    with pytest.raises(ValueError, match="divisible by the number of processes"):
        RankSlices(batches, Ranks(0, 3))


@pytest.mark.parametrize(
    ("gpus", "local_world", "backend", "devices"),
    [(2, 2, "nccl", [0, 1]), (1, 2, "gloo", [0, 0]), (2, 4, "gloo", [0, 1, 0, 1])],
)
def test_processes_that_share_a_gpu_take_gloo_and_the_gpus_in_turn(
    monkeypatch, gpus, local_world, backend, devices
):
    import torch

    from bench.train.distributed import backend_for, local_device

    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(local_world))
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert backend_for(cuda) == backend and backend_for(cpu) == "gloo"
    taken = []
    for rank in range(local_world):
        monkeypatch.setenv("LOCAL_RANK", str(rank))
        taken.append(local_device(cuda).index)
        assert local_device(cpu) == cpu
    assert taken == devices


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads Linux's /proc")
def test_a_signal_to_the_command_stops_every_process_in_one_line(tmp_path):
    # SIGINT to `run --nproc 2` alone (a scheduler's, or `kill -INT`): torchrun passes it on,
    # each process stops at its checkpoint, one line says so (not one per process, and no
    # torchrun traceback), and none is left training (the command had left both).
    results, output = tmp_path / "results", tmp_path / "output.txt"
    slow = [*ARGS, "--epochs", "300", "--nproc", "2", "--results", str(results)]
    command = [sys.executable, "-m", "bench.cli", "run", "--loss", "nngk", *slow]
    with open(output, "w") as out:  # not a pipe: a process left running would hold it open
        parent = subprocess.Popen(command, stdout=out, stderr=out, start_new_session=True)
    try:
        until(lambda: "epoch 2/300" in output.read_text(), 120, "second epoch")
        os.kill(parent.pid, signal.SIGINT)
        assert parent.wait(timeout=60) == 130
        left = [p for p in processes_naming(str(results)) if p != parent.pid]
    finally:
        kill_left_over(results, parent.pid)
    text = output.read_text()
    assert text.count("interrupted") == 1 and "Traceback" not in text, text
    assert left == []


def kill_left_over(results, *pids: int) -> None:
    for pid in {*processes_naming(str(results)), *pids}:
        with suppress(OSError):
            os.kill(pid, signal.SIGKILL)
