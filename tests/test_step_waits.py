"""The training step never waits for the GPU (issue 44): a tensor made from host data is a copy
from the host that waits for the GPU to finish its queue, and reading a value back (`.item()`,
`bool()`, a boolean mask, `nonzero`) waits for it too; a step that waits leaves the GPU idle
while the host queues the next work. Here on the CPU, such operations are seen as torch's
operators while a dispatch mode is entered. Not seen here: `.cpu()`, `.numpy()` and `.tolist()`
of a tensor, which copy nothing on the CPU (on a GPU they are a copy that waits)."""

from collections import Counter
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

import losses
from bench.data.crops import Crops, pad_batch

ATEN = torch.ops.aten
WAITING = {  # operators that make a GPU's host wait: a copy from the host, or a value read back
    ATEN.lift_fresh.default,
    ATEN._local_scalar_dense.default,
    ATEN.nonzero.default,
    ATEN.masked_select.default,
    ATEN.equal.default,
    ATEN.is_nonzero.default,
    ATEN.bincount.default,
    ATEN._unique2.default,
    ATEN.unique_consecutive.default,
    ATEN.unique_dim.default,
    ATEN.repeat_interleave.Tensor,
}


class Waits(TorchDispatchMode):
    """Counts, by name, the operators that would wait for a GPU while it is entered."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in WAITING:
            self.seen[func.name()] += 1
        elif func is ATEN.index.Tensor and any(masks(args[1])):
            self.seen["boolean mask"] += 1
        return func(*args, **(kwargs or {}))

    @property
    def count(self) -> int:
        return sum(self.seen.values())


def masks(indices) -> list[bool]:
    """Which of an indexing's indices are boolean masks (their size is read back)."""
    return [i is not None and i.dtype == torch.bool for i in indices]


def test_the_mode_sees_copies_from_the_host_and_values_read_back():
    x = torch.arange(6.0)
    with Waits() as seen:
        x[:, None][[0, 2]]  # an index list: a tensor made from host data
        x.sum().item()
        bool(x[0] > 1)
        x[x > 2]
        torch.nonzero(x)
    assert seen.seen == {
        "aten::lift_fresh": 1, "aten::_local_scalar_dense": 2, "boolean mask": 1, "aten::nonzero": 1
    }  # fmt: skip


def test_training_crops_never_wait_for_the_device():
    images = [torch.randint(0, 256, (3, h, w), dtype=torch.uint8) for h, w in ((40, 30), (30, 50))]
    batch = pad_batch(images)
    for mode in ("squash", "aspect"):
        crops = Crops(crop=16, resize=20, mode=mode, train=True)
        crops(batch, torch.Generator().manual_seed(0))  # statistics placed on the device once
        with Waits() as seen:
            crops(batch, torch.Generator().manual_seed(0))
        assert seen.count == 0, (mode, seen.seen)


def test_an_nngk_step_never_waits_for_the_device():
    loss = losses.build_loss("nngk", {"k": 5}, num_train=30, num_classes=3, dims=4)
    loss.refresh(torch.randn(30, 4), torch.arange(30) % 3)
    x = torch.randn(6, 4, requires_grad=True)
    with Waits() as seen:
        loss(x, torch.arange(6) % 3, torch.arange(6)).backward()
    assert seen.count == 0 and x.grad is not None


class LoadedApart:
    """A run's training loader whose batches are loaded outside the dispatch mode: on a GPU
    machine the loader makes CPU tensors, which wait for nothing."""

    def __init__(self, loader) -> None:
        self.loader, self.batch_sampler = loader, loader.batch_sampler

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        with _disable_current_modes():
            batches = iter(self.loader)
        while True:
            with _disable_current_modes():
                batch = next(batches, None)
            if batch is None:
                return
            yield batch


@pytest.fixture(scope="module")
def jpeg_folder(tmp_path_factory) -> Path:
    from bench.speed.train_step import folder_set

    return folder_set(tmp_path_factory.mktemp("jpegs"), 64, classes=8)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("loss", ["nngk", "softmax"])
def test_a_training_epoch_of_the_harness_never_waits_for_the_device(
    jpeg_folder, tmp_path, monkeypatch, loss, precision
):
    """The whole step as the trainer takes it: the batch to the device, the crops, the network
    under its precision, the loss, the guard on its value, backward and the optimizer."""
    from bench.train.compute import Compute
    from bench.train.loaders import with_data_identity
    from bench.train.presets import make_configs
    from bench.train.trainer import Trainer

    monkeypatch.setenv("NNGK_CACHE", str(tmp_path / "cache"))
    settings = dict(backbone="small_cnn", pretrained="none", batch_size=8, epochs=2, resize=24)
    settings.update(crop=16, val_fraction=0.0, precision=precision)
    (cfg,) = make_configs(f"folder:{jpeg_folder}", loss, (8,), {}, **settings)
    (cfg,) = with_data_identity([cfg])
    trainer = Trainer(cfg, tmp_path / "run", Compute.resolve("cpu"))
    trainer.refresh()
    trainer.train_epoch(0)
    trainer.loader = LoadedApart(trainer.loader)
    with Waits() as seen:
        steps = trainer.train_epoch(1)
    assert steps.count == 4 and seen.count == 0, seen.seen
