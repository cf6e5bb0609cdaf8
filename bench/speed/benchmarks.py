"""Speed benchmarks that print ratios (not timed unit tests)."""

from __future__ import annotations

import time
from typing import Any, Callable

import torch


def seconds_per_call(fn: Callable[[], None], repeats: int = 3) -> float:
    fn()  # warm-up
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats


def timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[float, Any]:
    """Seconds of one call, and its result (for searches too long to repeat)."""
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return time.perf_counter() - start, result


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
    for n_classes in (c for c in classes if 2 * c <= batch):
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


def clustered_embeddings(n: int, dims: int, classes: int, seed: int = 0):
    """n points around `classes` random centres: noisy enough that retrieval is imperfect."""
    import numpy as np

    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    centres = rng.normal(size=(classes, dims))
    return (centres[labels] + 2 * rng.normal(size=(n, dims))).astype("float32"), labels


def evaluator_benchmark(sizes=(10_000, 50_000), dims: int = 128, classes: int = 100) -> list[dict]:
    """Our evaluator against PML's AccuracyCalculator computing the same metrics (R@1, MAP@R,
    one k-means NMI), with both R@1 and MAP@R, which must agree."""
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

    from bench.evaluation.metrics import evaluate

    include = ("precision_at_1", "mean_average_precision_at_r", "NMI")
    calc = AccuracyCalculator(include=include, k="max_bin_count", device=torch.device("cpu"))
    rows = []
    for n in sizes:
        x, labels = clustered_embeddings(n, dims, classes)
        t_ours, ours = timed(evaluate, x, labels, best_of=False)
        t_pml, pml = timed(calc.get_accuracy, torch.from_numpy(x), torch.from_numpy(labels))
        rows.append(
            {
                "items": n,
                "dims": dims,
                "ours_s": t_ours,
                "pml_s": t_pml,
                "pml / ours": t_pml / t_ours,
                "R@1 ours": ours.metrics["recall@1"],
                "R@1 pml": pml["precision_at_1"],
                "MAP@R ours": ours.metrics["map@r"],
                "MAP@R pml": pml["mean_average_precision_at_r"],
            }
        )
    return rows
