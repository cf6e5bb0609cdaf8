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
        start = time.perf_counter()
        ours = evaluate(x, labels, best_of=False)
        t_ours = time.perf_counter() - start
        start = time.perf_counter()
        pml = calc.get_accuracy(torch.from_numpy(x), torch.from_numpy(labels))
        t_pml = time.perf_counter() - start
        rows.append(
            {
                "items": n,
                "dims": dims,
                "ours_s": t_ours,
                "pml_s": t_pml,
                "pml / ours": t_pml / t_ours,
                "R@1 ours": ours["recall@1"],
                "R@1 pml": pml["precision_at_1"],
                "MAP@R ours": ours["map@r"],
                "MAP@R pml": pml["mean_average_precision_at_r"],
            }
        )
    return rows


def throughput(dataset, batch_size: int = 64, batches: int = 10, workers: int = 0) -> float:
    """Images per second that a DataLoader with `workers` processes yields from `dataset`."""
    from torch.utils.data import DataLoader

    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=workers)
    start, seen = time.perf_counter(), 0
    for i, (x, _, _) in enumerate(loader):
        seen += len(x)
        if i + 1 == batches:
            break
    return seen / (time.perf_counter() - start)


class DecodedEveryEpoch:
    """The same items as a cached split, decoded from the image files on every access."""

    def __init__(self, paths: list[str], size: int, transform):
        self.paths, self.size, self.transform = paths, size, transform

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        from bench.data.images import load_image

        pixels = torch.from_numpy(load_image(self.paths[i], None, self.size)).permute(2, 0, 1)
        return self.transform(pixels), 0, i


def model_throughput(backbone: str, size: int, batch_size: int = 32, steps: int = 3) -> float:
    """Training images per second of a backbone (forward, backward, SGD step) at this size, on
    the device a run would train on."""
    from bench.models.embedding import build_model
    from bench.util.runtime import default_device

    device = default_device()
    model = build_model(backbone, 64, "none", 3).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(batch_size, 3, size, size, device=device)

    def step() -> None:
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()  # time the work, not its launch

    return batch_size / seconds_per_call(step, repeats=steps)


def loader_benchmark(
    paths: list[str], resize: int, crop: int, backbone: str, cache_dir, workers: int = 0
) -> dict:
    """Loader throughput from the image cache and from decoding every epoch (with `workers`
    loader processes), against the model's training throughput at the same crop size."""
    import numpy as np

    from bench.data.images import CachedImages, build_cache, train_transform

    start = time.perf_counter()
    cache = build_cache(paths, None, resize, cache_dir)
    build_s = time.perf_counter() - start
    tf = train_transform(crop)
    cached = CachedImages(cache, np.arange(len(paths)), np.zeros(len(paths)), tf)
    rows = {
        "images": len(paths),
        "cache build s (once)": build_s,
        "loader workers": workers,
        "cached img/s": throughput(cached, workers=workers),
        "decoded img/s": throughput(DecodedEveryEpoch(paths, resize, tf), workers=workers),
        f"{backbone} train img/s": model_throughput(backbone, crop),
    }
    rows["cache speed-up"] = rows["cached img/s"] / rows["decoded img/s"]
    rows["cached / model"] = rows["cached img/s"] / rows[f"{backbone} train img/s"]
    rows["decoded / model"] = rows["decoded img/s"] / rows[f"{backbone} train img/s"]
    return rows


def synthetic_jpegs(folder, count: int = 640, size: tuple[int, int] = (500, 375)) -> list[str]:
    """JPEG files the size of a typical Cars196/CUB photo, for a benchmark without the data."""
    from pathlib import Path

    import numpy as np
    from PIL import Image

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    paths = []
    for i in range(count):
        path = folder / f"{i:05d}.jpg"
        if not path.exists():
            noise = rng.integers(0, 255, (size[1] // 8, size[0] // 8, 3), dtype=np.uint8)
            Image.fromarray(noise).resize(size).save(path, quality=90)
        paths.append(str(path))
    return paths
