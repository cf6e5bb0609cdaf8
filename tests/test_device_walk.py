"""The device's walk (docs/development.md, "The walk of the device"): `run --device` is resolved
once, by the command, into a `Compute` that the trainer, the baselines and the evaluator are
given; nothing below the command defaults or derives it again."""

from __future__ import annotations

import importlib
import json
import pickle
import sys

import pytest
import torch

from bench.train.compute import Compute
from bench.train.distributed import ONE_PROCESS, decided_by_main
from bench.train.guards import Diverged
from tests.conftest import cli

ARGS = ["--dataset", "glyphs:classes=20,instances=12", "--dims", "8", "--epochs", "1"]
# Every module on `run`'s path to the search, imported before their names are replaced.
PATH = (
    "bench.cli.training",
    "bench.train.baseline",
    "bench.train.compute",
    "bench.train.evaluations",
    "bench.train.run_evaluation",
    "bench.train.trainer",
    "bench.train.untrained",
)


def test_run_resolves_its_device_once_and_nothing_below_defaults_it(tmp_path, monkeypatch):
    # Before: the trainer and the baselines each defaulted a device the command had left None
    # (3 defaults on one path), and each derived its own search device from it.
    for name in PATH:
        importlib.import_module(name)
    defaulted, resolved = [], []

    def default_device() -> torch.device:
        if defaulted:
            raise AssertionError("the device was defaulted again below the command")
        defaulted.append(True)
        return torch.device("cpu")

    # Every binding of it, however a module imported it.
    for name, module in list(sys.modules.items()):
        if name.startswith("bench") and hasattr(module, "default_device"):
            monkeypatch.setattr(module, "default_device", default_device)
    real = Compute.resolve.__func__
    monkeypatch.setattr(
        Compute, "resolve", classmethod(lambda cls, *a: resolved.append(a) or real(cls, *a))
    )
    out = cli("run", "--loss", "contrastive", *ARGS, "--results", tmp_path)
    assert out.exit_code == 0, out.output
    assert len(defaulted) == 1 and resolved == [(None,)]  # no --device: CUDA where present
    finished = [p for p in tmp_path.iterdir() if (p / "metrics.json").is_file()]
    assert len(finished) == 3  # both baselines and the run: trained, embedded and evaluated
    devices = {json.loads((p / "config.json").read_text()).get("device") for p in finished}
    assert devices == {None, "cpu"}  # the run records where it trained; a baseline does not
    defaulted.clear(), resolved.clear()
    out = cli("run", "--loss", "contrastive", *ARGS, "--device", "cpu", "--results", tmp_path)
    assert out.exit_code == 0, out.output
    assert defaulted == [] and resolved == [(torch.device("cpu"),)]


def test_a_process_under_torchrun_resolves_its_own_gpu_and_searches_there(monkeypatch):
    import bench.util.torch_knn as torch_knn

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch_knn, "uses_gpu", lambda: False)  # no faiss-gpu: torch searches
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert Compute.resolve("cuda") == Compute(torch.device("cuda", 1), torch.device("cuda", 1))
    assert Compute.resolve("cpu") == Compute(torch.device("cpu"), None)  # faiss, as ever
    monkeypatch.setattr(torch_knn, "uses_gpu", lambda: True)  # faiss-gpu installed
    assert Compute.resolve("cuda").search is None


def test_a_divergence_on_the_first_process_reaches_the_others_whole():
    # `decided_by_main` sends the first process's Diverged to the others (pickled by
    # torch.distributed), which raise it: where it happened, not only its message.
    sent = pickle.loads(pickle.dumps(Diverged(3, "validation embeddings: NaN", float("nan"))))
    assert (sent.epoch, sent.step, str(sent)) == (3, "validation embeddings: NaN", str(sent))
    assert str(sent) == "epoch 3, validation embeddings: NaN"
    assert decided_by_main(lambda: {"score": 1.0}, ONE_PROCESS, Diverged) == {"score": 1.0}

    def diverges():
        raise Diverged(2, 5, float("inf"))

    with pytest.raises(Diverged, match="epoch 2, step 5"):
        decided_by_main(diverges, ONE_PROCESS, Diverged)
