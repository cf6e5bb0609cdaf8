"""The device's walk (docs/development.md, "The walk of the device"): each command's `--device`
(`run`, `tune`, `pretrain`, `features`) is resolved once, by the command, into a `Compute` that
the trainer, the baselines and the evaluator are given; nothing below the command defaults or
derives it again."""

from __future__ import annotations

import ast
import importlib
import json
import pickle
import sys
from pathlib import Path

import pytest
import torch

from bench.train.compute import Compute
from bench.train.distributed import ONE_PROCESS, decided_by_main
from bench.train.guards import Diverged
from tests.conftest import cli

TINY = "glyphs:classes=20,instances=12"
ARGS = ["--dataset", TINY, "--dims", "8", "--epochs", "1"]
# Every module on the commands' paths to the device, imported before their names are replaced.
PATH = (
    "bench.cli.features",
    "bench.cli.pretrain",
    "bench.cli.training",
    "bench.cli.tune",
    "bench.train.baseline",
    "bench.train.compute",
    "bench.train.evaluations",
    "bench.train.extract",
    "bench.train.pretrain",
    "bench.train.run_evaluation",
    "bench.train.step_rates",
    "bench.train.trainer",
    "bench.train.untrained",
    "bench.tune.study",
)
# The one place that defaults the device, and the commands' one place that resolves it.
DEFAULTS, RESOLVES = Path("bench/train/compute.py"), Path("bench/cli/training.py")


@pytest.fixture
def resolutions(monkeypatch) -> tuple[list, list]:
    """(the defaults taken, the arguments `Compute.resolve` was given): `default_device`
    replaced, everywhere it is bound, by one that raises when it is called a second time."""
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
    return defaulted, resolved


def test_run_resolves_its_device_once_and_nothing_below_defaults_it(tmp_path, resolutions):
    # Before: the trainer and the baselines each defaulted a device the command had left None
    # (3 defaults on one path), and each derived its own search device from it.
    defaulted, resolved = resolutions
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


def test_tune_resolves_its_device_once_for_its_trials_and_retrained_runs(tmp_path, resolutions):
    # Before: tune had no --device; each trial's trainer defaulted it (`Compute.resolve()`),
    # and the retrained runs defaulted it again.
    defaulted, resolved = resolutions
    args = ["tune", "--loss", "contrastive", *ARGS, "--trials", 1, "--final-epochs", 1]
    out = cli(*args, "--seeds", 0, "--results", tmp_path)
    assert out.exit_code == 0, out.output
    # The command's one resolution; the retrained runs (`run_all`, in this process) are given
    # the Compute its trials took, and resolve nothing again.
    assert len(defaulted) == 1 and resolved == [(None,)]
    trials = list((tmp_path / "tune" / "trials").iterdir())
    retrained = [p for p in tmp_path.glob("*-contrastive-*") if (p / "metrics.json").is_file()]
    assert len(trials) == 1 and len(retrained) == 1  # the trial and the run: both trained
    for run in (*trials, *retrained):
        assert json.loads((run / "config.json").read_text())["device"] == "cpu"
    defaulted.clear(), resolved.clear()
    out = cli(*args, "--seeds", 1, "--device", "cpu", "--results", tmp_path)
    assert out.exit_code == 0, out.output
    cpu = torch.device("cpu")
    assert defaulted == [] and resolved == [(cpu,)]  # the trial found finished, read; retrained


def test_pretrain_resolves_its_device_once_at_the_command(tmp_path, resolutions):
    # Before: it defaulted it where it trained, below the command (`device or
    # default_device()`), never through `Compute.resolve`.
    defaulted, resolved = resolutions
    args = ["pretrain", "--dataset", "glyphs:first=1000,classes=20", "--epochs", 1]
    out = cli(*args, "--out", tmp_path / "w.pt")
    assert out.exit_code == 0, out.output
    assert len(defaulted) == 1 and resolved == [(None,)]
    assert json.loads((tmp_path / "w.json").read_text())["val_accuracy"]  # trained
    defaulted.clear(), resolved.clear()
    out = cli(*args, "--out", tmp_path / "v.pt", "--device", "cpu")
    assert out.exit_code == 0, out.output
    assert defaulted == [] and resolved == [(torch.device("cpu"),)]


def test_features_resolves_its_device_once_at_the_command(tmp_path, resolutions):
    # Before: extract_features defaulted it where it embedded, below the command.
    defaulted, resolved = resolutions
    args = ["features", "--backbone", "small_cnn", "--pretrained", "none", "--dataset", TINY]
    out = cli(*args, "--out", tmp_path / "f.npz")
    assert out.exit_code == 0, out.output
    assert len(defaulted) == 1 and resolved == [(None,)]
    assert (tmp_path / "f.npz").is_file()
    defaulted.clear(), resolved.clear()
    out = cli(*args, "--out", tmp_path / "g.npz", "--device", "cpu")
    assert out.exit_code == 0, out.output
    assert defaulted == [] and resolved == [(torch.device("cpu"),)]


def device_calls(path: Path) -> list[tuple[str, int]]:
    """The calls of `default_device` (however it was imported) and of `Compute.resolve` in
    `path`, with their lines."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        func = node.func if isinstance(node, ast.Call) else None
        called = getattr(func, "id", None) or getattr(func, "attr", None)
        owner = getattr(getattr(func, "value", None), "id", None)
        if called == "default_device":
            found.append(("default_device", node.lineno))
        elif (owner, called) == ("Compute", "resolve"):
            found.append(("Compute.resolve", node.lineno))
    return found


def test_nothing_below_the_commands_defaults_or_resolves_the_device():
    # Before: the trainer, extract.py, pretrain.py and step_rates.py each did, below a command.
    root = Path(__file__).resolve().parents[1]
    allowed = {"default_device": DEFAULTS, "Compute.resolve": RESOLVES}
    found = [
        f"{path.relative_to(root)}:{line} calls {name}"
        for path in sorted((root / "bench").rglob("*.py"))
        for name, line in device_calls(path)
        if path.relative_to(root) != allowed[name]
    ]
    assert found == []


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
