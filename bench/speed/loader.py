"""The input pipeline against the model it feeds: images per second from the cache to the
network's input on the device (uint8 batches, crops made there), from decoding every epoch
with per-image transforms, and the model's own training images per second. A loader's rate is
taken after its first batch, whose time (the workers' start, paid once a run) is shown apart,
over whole rounds of its workers (the batches they made beside the first are not a rate)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import torch

from bench.speed.benchmarks import seconds_per_call
from bench.util.runtime import synchronize

CACHED_BATCHES = 10  # batches, about, that each loader's rate reads
DECODED_BATCHES = 4  # fewer where every image is decoded: a CPU decodes about 300 a second


def batches_needed(workers: int) -> int:
    """Batches a loader's rate needs: the first and one round of its workers after it."""
    return max(workers, 1) + 1


def batches_read(batches: int, workers: int) -> int:
    """About `batches` batches in whole rounds of the workers after the first (at least one)."""
    per = max(workers, 1)
    return 1 + per * max(1, (batches - 1) // per)


def rate_after_first(
    batches: Iterable, size: Callable[[Any], int], limit: int, device: torch.device,
    clock: Callable[[], float] = time.perf_counter, workers: int = 0,
) -> tuple[float, float]:  # fmt: skip
    """Seconds to the first batch (the workers' start, which a run pays once) and items per
    second over whole rounds of the `workers` after it, within `limit` batches. Each worker
    makes every W-th batch, and the others make theirs while the first is awaited: so from the
    first batch's arrival the rate counts batches 2 .. kW+1 up to the arrival of the last
    (k whole rounds; the main process alone is a round of one)."""
    per = max(workers, 1)
    last = per * ((limit - 1) // per)  # the index of the last batch read
    if last < per:
        need = batches_needed(workers)
        raise ValueError(f"a rate needs at least {need} batches (the first, a round); got {limit}")
    start, first, seen, read = clock(), None, 0, 0
    for i, batch in enumerate(batches):
        n, read = size(batch), i + 1
        if first is None:
            synchronize(device)
            first = clock()
        else:
            seen += n
        if i == last:
            break
    synchronize(device)
    if read <= last:
        raise ValueError(f"the loader gave {read} batches of the {last + 1} the rate takes")
    return first - start, seen / (clock() - first)


def throughput(
    dataset,
    device: torch.device,
    batch_size: int = 64,
    batches: int = CACHED_BATCHES,
    workers: int = 0,
) -> tuple[float, float]:
    """Seconds to the first batch, and images per second after it (over whole rounds of the
    workers, about `batches` in all, as many as the data set holds), that reach the device as
    the network's input (training crops)."""
    from bench.util.batches import split_loader, to_inputs

    held = -(-len(dataset) // batch_size)
    limit = min(batches_read(batches, workers), held)
    loader = split_loader(dataset, device, workers, batch_size=batch_size, shuffle=True)
    gen = torch.Generator(device).manual_seed(0)
    size = lambda batch: len(to_inputs(dataset, batch[0], device, gen))  # noqa: E731
    return rate_after_first(loader, size, limit, device, workers=workers)


class DecodedEveryEpoch:
    """The same images decoded from their files at every access and transformed one by one on
    the host (torchvision's random-resized crop, flip, normalisation): the usual pipeline."""

    def __init__(self, paths: list[str], crop: int):
        from torchvision.transforms import v2

        from bench.data.crops import IMAGENET_MEAN, IMAGENET_STD

        self.paths, self.labels = paths, np.zeros(len(paths), np.int64)
        self.transform = v2.Compose(
            [
                v2.RandomResizedCrop(crop),
                v2.RandomHorizontalFlip(),
                v2.ToDtype(torch.float32, scale=True),
                v2.Normalize(IMAGENET_MEAN, IMAGENET_STD),
            ]
        )

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        from PIL import Image

        with Image.open(self.paths[i]) as img:
            pixels = torch.from_numpy(np.array(img.convert("RGB"))).permute(2, 0, 1)
        return self.transform(pixels), 0, i


def model_throughput(
    backbone: str, size: int, device: torch.device, batch_size: int = 32, steps: int = 3
) -> float:
    """Training images per second of a backbone (forward, backward, SGD step) at this size."""
    from bench.models.embedding import build_model

    model = build_model(backbone, 64, "none", 3).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(batch_size, 3, size, size, device=device)

    def step() -> None:
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        synchronize(device)

    return batch_size / seconds_per_call(step, repeats=steps)


def loader_benchmark(
    paths: list[str],
    resize: int,
    crop: int,
    backbone: str,
    cache_dir: Path,
    workers: int = 0,
    device: str = "cpu",
    batch_size: int = 64,
) -> dict:
    """Images per second from the cache (aspect kept, random-resized crops on `device`) and
    from decoding every epoch (with `workers` loader processes), against the model's training
    images per second at the same crop size, on `device`."""
    from bench.data.crops import Crops
    from bench.data.image_cache import build_cache
    from bench.data.images import CachedImages

    dev = torch.device(device)
    start = time.perf_counter()
    cache = build_cache(paths, None, resize, cache_dir)
    build_s = time.perf_counter() - start
    crops = Crops(crop, resize, "aspect", train=True)
    cached = CachedImages(cache, np.arange(len(paths)), np.zeros(len(paths)), crops)
    model = model_throughput(backbone, crop, dev, batch_size=min(batch_size, 32))
    cached_first, cached_rate = throughput(cached, dev, batch_size, workers=workers)
    decoded = DecodedEveryEpoch(paths, crop)
    decoded_first, decoded_rate = throughput(decoded, dev, batch_size, DECODED_BATCHES, workers)
    rows = {
        "images": len(paths),
        "device": str(dev),
        "cache build s (once)": build_s,
        "loader workers": workers,
        "cached: first batch s": cached_first,
        "cached img/s": cached_rate,
        "decoded: first batch s": decoded_first,
        "decoded img/s": decoded_rate,
        f"{backbone} train img/s": model,
    }
    rows["cache speed-up"] = rows["cached img/s"] / rows["decoded img/s"]
    rows["cached / model"] = rows["cached img/s"] / model
    rows["decoded / model"] = rows["decoded img/s"] / model
    return {k: f"{v:.4g}" if isinstance(v, float) else v for k, v in rows.items()}


def synthetic_jpegs(folder, count: int = 640, size: tuple[int, int] = (500, 375)) -> list[str]:
    """JPEG files the size of a typical Cars196/CUB photo, for a benchmark without the data;
    encoded on every core the process may use (a GPU machine's time is short)."""
    from concurrent.futures import ThreadPoolExecutor

    from PIL import Image

    from bench.data.cache_times import usable_cpus

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    paths = [str(folder / f"{i:05d}.jpg") for i in range(count)]
    noises = [rng.integers(0, 255, (size[1] // 8, size[0] // 8, 3), dtype=np.uint8) for _ in paths]

    def write(i: int) -> None:
        if not Path(paths[i]).exists():
            Image.fromarray(noises[i]).resize(size).save(paths[i], quality=90)

    with ThreadPoolExecutor(usable_cpus()) as pool:
        list(pool.map(write, range(count)))
    return paths
