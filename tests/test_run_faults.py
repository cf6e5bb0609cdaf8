"""Faults during a run: divergence to NaN, a truncated checkpoint, a full disk, a read-only
results folder. Each is one line naming what is wrong, a non-zero exit, nothing half-written."""

import errno
import json
import os
import stat
import subprocess
from contextlib import contextmanager
from types import SimpleNamespace

import pytest
import torch

import bench.train.trainer as trainer
import bench.util.atomic as atomic
from bench.runs.config import RunConfig
from bench.train.guards import DivergedAtStart
from losses.softmax import SoftmaxLoss
from tests.conftest import FAST, cli


def invoke(results, *extra):
    """A fast softmax run into `results` (an exception: exit code 1, as a user would see)."""
    return cli("run", "--loss", "softmax", *FAST, "--results", results, *extra,
               catch_exceptions=True)  # fmt: skip


def error_line(out) -> str:
    assert out.exit_code != 0
    assert "Traceback" not in out.output, out.output
    lines = [line for line in out.output.splitlines() if line.startswith("Error: ")]
    assert len(lines) == 1, out.output
    return lines[0]


def the_run(results):
    (run,) = [p for p in results.iterdir() if "-softmax-" in p.name and not p.name.startswith(".")]
    return run


def no_temporary_files(folder):
    return not [p for p in folder.rglob("*") if p.name.endswith(".tmp")]


@pytest.fixture
def nan_at(monkeypatch):
    """nan_at(epoch, step): the softmax loss returns NaN at that step (both counted from 1)."""
    where = {}
    seen = {"epoch": 0, "step": 0}
    real_loader, real_forward = trainer.epoch_loader, SoftmaxLoss.forward

    def loader(batches, seed):
        seen["epoch"], seen["step"] = seen["epoch"] + 1, 0
        return real_loader(batches, seed)

    def forward(self, embeddings, labels, indices=None):
        seen["step"] += 1
        value = real_forward(self, embeddings, labels, indices)
        hit = (seen["epoch"], seen["step"]) == (where["epoch"], where["step"])
        return value * torch.tensor(float("nan")) if hit else value

    monkeypatch.setattr(trainer, "epoch_loader", loader)
    monkeypatch.setattr(SoftmaxLoss, "forward", forward)
    return lambda epoch, step: where.update(epoch=epoch, step=step)


def test_divergence_stops_and_tests_the_best_epoch_so_far(tmp_path, nan_at):
    nan_at(2, 3)
    out = invoke(tmp_path)
    line = error_line(out)
    assert "diverged" in line and "--lr" in line
    metrics = json.loads((the_run(tmp_path) / "metrics.json").read_text())
    assert metrics["diverged"] == "epoch 2, step 3 (loss nan)"
    assert metrics["best_epoch"] == 1 and 0 < metrics["map@r"] <= 1
    # Run again: it says why it is finished, instead of crashing the same way.
    again = invoke(tmp_path)
    assert again.exit_code == 0 and "diverged at epoch 2, step 3" in again.output


def test_embeddings_too_large_for_float32_distances_are_a_divergence(tmp_path, monkeypatch):
    # Finite but about 1e20 (softmax at --lr 100): faiss's k-means aborted the process at the
    # test, and the run could never finish. Epoch 2's validation embeddings are scaled so.
    real_validate = trainer.Trainer.validate

    def validate(self, epoch):
        if epoch != 2:
            return real_validate(self, epoch)
        real_embed = self.embed_split
        self.embed_split = lambda split: (real_embed(split)[0] * 1e20, real_embed(split)[1])
        try:
            return real_validate(self, epoch)
        finally:
            del self.embed_split

    monkeypatch.setattr(trainer.Trainer, "validate", validate)
    line = error_line(invoke(tmp_path))
    assert "diverged" in line and "--lr" in line
    metrics = json.loads((the_run(tmp_path) / "metrics.json").read_text())
    assert metrics["diverged"].startswith("epoch 2, validation embeddings: a value of ")
    assert "overflows float32's squared distances" in metrics["diverged"]
    assert metrics["best_epoch"] == 1 and 0 < metrics["map@r"] <= 1


def test_divergence_in_the_first_epoch_is_an_error_with_nothing_finished(tmp_path, nan_at):
    nan_at(1, 2)
    line = error_line(invoke(tmp_path))
    assert "epoch 1, step 2" in line and "before any epoch finished" in line and "--lr" in line
    assert not (the_run(tmp_path) / "metrics.json").exists()


def test_divergence_at_the_start_names_the_loss_parameters_given():
    # Before: the trainer's line named --lr alone (issue 69, item 19); a miner scales nothing.
    cfg = RunConfig(loss="arcface", lr=0.01, loss_params={"scale": 1e30, "miner": "semihard"})
    run = SimpleNamespace(cfg=cfg, name="a-run")
    with pytest.raises(DivergedAtStart) as err:
        trainer.Trainer.stop_diverged(run, {"best": {"model": None}}, "epoch 1, step 2")
    assert str(err.value) == (
        "a-run: training diverged at epoch 1, step 2 before any epoch finished; a learning rate "
        "below 0.01 (--lr), or other values of the loss parameters given (scale=1e+30), may train"
    )


def test_a_truncated_checkpoint_is_one_line_offering_force(tmp_path):
    assert invoke(tmp_path).exit_code == 0
    run = the_run(tmp_path)
    (run / "metrics.json").unlink()  # as if killed after its last checkpoint
    ckpt = run / "checkpoint.pt"
    ckpt.write_bytes(ckpt.read_bytes()[:1000])
    line = error_line(invoke(tmp_path))
    assert str(ckpt) in line and "unreadable checkpoint" in line and "--force" in line
    assert invoke(tmp_path, "--force").exit_code == 0
    assert (run / "metrics.json").is_file()


@pytest.mark.parametrize(
    "error, said",
    [
        (errno.ENOSPC, "no space left"),
        (errno.EFBIG, "a limit on a file's size, `ulimit -f`, or a disk quota); raise it"),
    ],
)
def test_a_full_disk_is_one_line_and_the_run_resumes(tmp_path, monkeypatch, error, said):
    real_fsync = os.fsync

    def full_disk_for_checkpoints(fd):  # written data reaches the disk at fsync at the latest
        if ".checkpoint.pt." in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(error, os.strerror(error))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full_disk_for_checkpoints)
    line = error_line(invoke(tmp_path))
    assert "checkpoint.pt" in line and said in line and "resume" in line
    run = the_run(tmp_path)
    assert not (run / "metrics.json").exists() and no_temporary_files(tmp_path)
    monkeypatch.undo()
    assert invoke(tmp_path).exit_code == 0 and (run / "metrics.json").is_file()


def test_a_read_only_results_folder_is_one_line(tmp_path, monkeypatch):
    results = tmp_path / "r"
    results.mkdir()
    if os.geteuid() == 0:  # root writes anywhere: the denial comes from a mocked mkstemp

        def denied(dir, prefix, suffix):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), dir)

        monkeypatch.setattr(atomic.tempfile, "mkstemp", denied)
    else:
        results.chmod(stat.S_IRUSR | stat.S_IXUSR)
    line = error_line(invoke(results))
    assert str(results) in line and "cannot write" in line and "--results" in line


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_written_files_respect_the_umask(tmp_path, mask, mode):
    old = os.umask(mask)
    try:
        atomic.atomic_write_json(tmp_path / "x.json", {"a": 1})
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "x.json").stat().st_mode) == mode


@contextmanager
def mounted(target, *options):
    """A real file system mounted on `target` (root only; skipped where mounting is denied)."""
    try:
        subprocess.run(["mount", *options, str(target)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as err:
        pytest.skip(f"cannot mount a file system here ({err})")
    try:
        yield target
    finally:
        subprocess.run(["umount", str(target)], check=False)


def test_a_real_full_disk_leaves_no_half_written_file(tmp_path):
    results = tmp_path / "small"
    results.mkdir()
    with mounted(results, "-t", "tmpfs", "-o", "size=400k", "tmpfs"):
        line = error_line(invoke(results))
        assert "no space left" in line and str(results) in line
        assert no_temporary_files(results)
        for folder in results.iterdir():  # finished means whole
            if (folder / "metrics.json").exists():
                assert (folder / "test_embeddings.npz").exists()
                json.loads((folder / "metrics.json").read_text())


def test_a_real_read_only_folder_keeps_its_finished_runs(tmp_path):
    results = tmp_path / "r"
    assert invoke(results).exit_code == 0
    before = sorted(p.name for p in results.iterdir())
    with mounted(results, "--bind", "-o", "ro", str(results)):
        line = error_line(invoke(results, "--seed", "1"))
        assert "cannot write" in line and str(results) in line
        out = cli("report", "--results", results, "--out", tmp_path / "rep")
        assert out.exit_code == 0, out.output
    assert sorted(p.name for p in results.iterdir()) == before


def test_a_cache_setting_naming_a_file_is_one_line_naming_it_and_nothing_is_written(
    tmp_path, monkeypatch
):
    not_a_folder = tmp_path / "cache"
    not_a_folder.write_text("a file")
    monkeypatch.setenv("NNGK_CACHE", str(not_a_folder))
    line = error_line(invoke(tmp_path / "results"))
    assert line == (
        f"Error: NNGK_CACHE={not_a_folder} is a file, not a folder; point NNGK_CACHE at a folder "
        "(created if missing) or unset it to use ~/.cache/nngk-bench"
    )
    assert not (tmp_path / "results").exists() and not_a_folder.read_text() == "a file"


def test_a_divergence_with_loss_parameters_given_names_them_beside_the_lr(tmp_path, monkeypatch):
    # Before: "a lower --lr may train them", though a parameter can make the loss non-finite
    # at any learning rate (arcface scale=1e30).
    from losses.contrastive import ContrastiveLoss

    epochs, real_loader, real = [], trainer.epoch_loader, ContrastiveLoss.forward

    def loader(batches, seed):
        epochs.append(seed)
        return real_loader(batches, seed)

    def forward(self, embeddings, labels, indices=None):  # NaN from epoch 2 on
        value = real(self, embeddings, labels, indices)
        return value * torch.tensor(float("nan")) if len(epochs) > 1 else value

    monkeypatch.setattr(trainer, "epoch_loader", loader)
    monkeypatch.setattr(ContrastiveLoss, "forward", forward)
    args = ["--loss-param", "pos_margin=0.1", "--loss-param", "neg_margin=0.9"]
    out = cli("run", "--loss", "contrastive", *FAST, "--results", tmp_path, *args,
              catch_exceptions=True)  # fmt: skip
    line = error_line(out)
    assert "run(s) diverged and were tested at their best epoch before it" in line, line
    assert line.endswith(
        "; a lower --lr, or other values of the loss parameters given (neg_margin=0.9, "
        "pos_margin=0.1), may train them (metrics.json: diverged)"
    ), line
