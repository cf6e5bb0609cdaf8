"""The training step makes no tensor from host data (issue 44): on a GPU each such tensor is a
copy from the host that waits for the GPU to finish its queue, and a step that waits leaves the
GPU idle while the host queues the next work. Here on the CPU, the tensors made from Python data
are seen as torch's `lift_fresh` operations."""

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import losses
from bench.data.crops import Crops, pad_batch


class FromHost(TorchDispatchMode):
    """Counts the tensors made from host data while it is entered."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += func is torch.ops.aten.lift_fresh.default
        return func(*args, **(kwargs or {}))


def test_the_mode_sees_a_tensor_made_from_host_data():
    with FromHost() as seen:
        torch.zeros(3)[:, None][[0, 2]]
    assert seen.count == 1


def test_training_crops_make_no_tensor_from_host_data():
    images = [torch.randint(0, 256, (3, h, w), dtype=torch.uint8) for h, w in ((40, 30), (30, 50))]
    batch = pad_batch(images)
    for mode in ("squash", "aspect"):
        crops = Crops(crop=16, resize=20, mode=mode, train=True)
        crops(batch, torch.Generator().manual_seed(0))  # statistics placed on the device once
        with FromHost() as seen:
            crops(batch, torch.Generator().manual_seed(0))
        assert seen.count == 0, mode


def test_an_nngk_step_makes_no_tensor_from_host_data():
    loss = losses.build_loss("nngk", {"k": 5}, num_train=30, num_classes=3, dims=4)
    loss.refresh(torch.randn(30, 4), torch.arange(30) % 3)
    x = torch.randn(6, 4, requires_grad=True)
    with FromHost() as seen:
        loss(x, torch.arange(6) % 3, torch.arange(6)).backward()
    assert seen.count == 0 and x.grad is not None
