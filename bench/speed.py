"""Speed benchmarks that print ratios (not timed unit tests)."""

from __future__ import annotations

import time
from typing import Callable

import torch


def seconds_per_call(fn: Callable[[], None], repeats: int = 3) -> float:
    fn()  # warm-up
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats


def lifted_step(loss_fn, x: torch.Tensor, labels: torch.Tensor) -> Callable[[], None]:
    def step() -> None:
        x.grad = None
        loss_fn(x, labels).backward()

    return step


def lifted_benchmark(batch: int = 128, dims: int = 64, classes=(2, 8, 32)) -> list[dict]:
    """Forward+backward time of PML's LiftedStructureLoss against ours, per classes per batch."""
    from pytorch_metric_learning.losses import LiftedStructureLoss

    from losses.lifted import lifted_structure_loss

    pml = LiftedStructureLoss(neg_margin=1.0, pos_margin=0.0)
    ours = lambda e, y: lifted_structure_loss(e, y, 1.0, 0.0)  # noqa: E731
    rows = []
    for n_classes in classes:
        x = torch.randn(batch, dims, requires_grad=True)
        labels = torch.arange(n_classes).repeat_interleave(batch // n_classes)
        t_pml = seconds_per_call(lifted_step(pml, x, labels))
        t_ours = seconds_per_call(lifted_step(ours, x, labels))
        rows.append(
            {
                "batch": batch,
                "classes": n_classes,
                "pml_s": t_pml,
                "ours_s": t_ours,
                "speed-up": t_pml / t_ours,
            }
        )
    return rows
