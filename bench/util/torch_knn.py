"""Exact squared-L2 nearest neighbours in plain torch, on any device: what the harness searches
with on a GPU, where faiss has no build for the machine (issue 44).

Distances are |q|^2 + |y|^2 - 2 q.y in float32, below 0 counted as 0 (faiss's formula), for a
chunk of queries at a time, at most `cells` distances held at once; each chunk asks
`torch.topk` for its own largest k. A chunk's |y|^2 - 2 q.y are one matrix product, and |q|^2
(the same along a query's row) is added to the k found only. Equal distances come back in index
order, as faiss orders them; which of several rows tied at the k-th distance is kept may differ
from faiss's."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from bench.util.arrays import chunk_rows
from bench.util.knn import knn, uses_gpu

CELLS = 2**26  # distances held at once: 256 MiB of float32
# On a GPU, up to 2 GiB of them. A GPU's top-k works a row per block: on an H100 at 1,000,000
# items, chunks of 536 queries took 31 s of parts a search where chunks of 67 took 40 s
# (docs/speed.md, `search-parts`).
GPU_CELLS = 2**29
FREE_SHARE = 16  # the distances take at most this fraction of a GPU's free memory


def search_device(device: str | torch.device | None) -> torch.device | None:
    """Where a run searches with torch: its device when that is a GPU and faiss has none
    (faiss-gpu, where installed, searches as before); None on the CPU, where faiss searches as
    it always has (the same results to the bit)."""
    if device is None or torch.device(device).type == "cpu" or uses_gpu():
        return None
    return torch.device(device)


def device_cells(device: str | torch.device) -> int:
    """Distances a chunk holds on `device`: CELLS on the CPU; on a GPU, GPU_CELLS or a
    FREE_SHARE-th of its free memory if less (never below CELLS). A large class's ranking
    holds about as much again (its top-k, their order, its AP@R's float64 sums)."""
    device = torch.device(device)
    if device.type != "cuda":
        return CELLS
    free, _ = torch.cuda.mem_get_info(device)
    return max(CELLS, min(GPU_CELLS, free // (4 * FREE_SHARE)))


class TorchSearch:
    """One base on `device`, searched by chunks of queries."""

    def __init__(self, base: np.ndarray | torch.Tensor, device: str | torch.device) -> None:
        self.device = torch.device(device)
        if not isinstance(base, torch.Tensor):
            base = torch.from_numpy(np.ascontiguousarray(base, dtype=np.float32))
        self.base = base.detach().float().to(self.device)
        self.norms = squared_norms(self.base)[:, 0]
        self.terms = product_terms(self.base, self.norms)

    def __len__(self) -> int:
        return len(self.base)

    def shifted(self, queries: torch.Tensor) -> torch.Tensor:
        """(queries, base rows) |y|^2 - 2 q.y: each query's squared distances less its |q|^2,
        in one product. |q|^2 + |y|^2 - 2 q.y in one addmm wrote and read the whole chunk
        five times; at 1,000,000 items an H100 took 16 of a search's 31 s on it
        (docs/speed.md)."""
        padded = torch.zeros((len(queries), self.terms.shape[1]), device=queries.device)
        padded[:, : queries.shape[1]] = queries
        padded[:, queries.shape[1]] = 1.0
        return padded @ self.terms.T

    def distances(self, queries: torch.Tensor) -> torch.Tensor:
        """(queries, base rows) squared distances, clamped at 0."""
        return self.shifted(queries).add_(squared_norms(queries)).clamp_min_(0)

    def nearest(
        self, queries: torch.Tensor, k: int, exclude: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The k nearest base rows of each query (on the device), base row exclude[i] left out
        of query i's: (distances, indices), by distance, then index."""
        dist = self.shifted(queries)
        if exclude is not None:
            dist[torch.arange(len(dist), device=dist.device), exclude] = float("inf")
        k = min(k, dist.shape[1] - (exclude is not None))
        # Unsorted: in_index_order sorts them anyway (a sort fewer; k of 10,000 of 100,000 on
        # 2 CPU cores: 329 ms against 535 ms).
        values, idx = torch.topk(dist, k, dim=1, largest=False, sorted=False)
        return in_index_order(values.add_(squared_norms(queries)).clamp_min_(0), idx)


def squared_norms(rows: torch.Tensor) -> torch.Tensor:
    return (rows * rows).sum(1, keepdim=True)


def product_terms(base: torch.Tensor, norms: torch.Tensor) -> torch.Tensor:
    """Each base row as [-2y, |y|^2, 0...], for a query [q, 1, 0...] to give |y|^2 - 2 q.y.
    The zeros make a row a multiple of 16 bytes, as a GPU's matrix product wants its rows."""
    n, dims = base.shape
    terms = torch.zeros((n, -(-(dims + 1) // 4) * 4), device=base.device)
    terms[:, :dims] = -2.0 * base  # exact: a power of two
    terms[:, dims] = norms
    return terms


def in_index_order(values: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows sorted by (value, index), as faiss orders them: topk leaves ties in no set order.
    One sort of a 64-bit key, the float32 value's bits made to order as the value does above
    the index's (-0.0 as 0.0), where two sorts (by index, then stably by value) took 1.6-2x as
    long (10,000 of 671 rows on 2 CPU cores: 259-310 ms against 494-521 ms)."""
    bits = (values.float() + 0.0).view(torch.int32)  # + 0.0: -0.0 becomes 0.0
    ordered = bits ^ ((bits >> 31) & 0x7FFFFFFF)  # negative floats' bits run backwards
    order = ((ordered.to(torch.int64) << 32) | idx).argsort(dim=1)
    return values.gather(1, order), idx.gather(1, order)


def nearest_chunks(
    search: TorchSearch,
    queries: torch.Tensor,
    need: np.ndarray,
    exclude_self: bool = False,
    which: np.ndarray | None = None,
    rows: int | None = None,
) -> Iterator[tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]]:
    """The queries `which` (default: all) in chunks of `rows` (default: `device_cells`
    distances) of like `need`, sorted by it: (the chunk's query indices, on the device; their
    nearest base rows as `TorchSearch.nearest` gives them, as many as the chunk's largest
    need). With `exclude_self`, base row i is query i, left out of its own results."""
    which = np.arange(len(queries)) if which is None else which
    order = which[np.argsort(need[which], kind="stable")]
    ordered = torch.from_numpy(order).to(search.device)
    step = rows or chunk_rows(len(search), device_cells(search.device))
    for start in range(0, len(order), step):
        picked = ordered[start : start + step]
        k = int(need[order[: start + step][-1]])
        yield picked, search.nearest(queries[picked], k, picked if exclude_self else None)


@torch.no_grad()
def torch_neighbours(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`bench.util.knn.knn` on x's device: each row's k nearest other rows (the row itself left
    out by index, its duplicates kept), (squared distances, indices), by distance, then index."""
    search = TorchSearch(x, x.device)
    found = [f for _, f in nearest_chunks(search, search.base, np.full(len(x), k), True)]
    return torch.cat([d for d, _ in found]), torch.cat([i for _, i in found])


def torch_knn(x: torch.Tensor, k: int) -> torch.Tensor:
    """`torch_neighbours`' indices."""
    return torch_neighbours(x, k)[1]


def nearest_others(
    x: np.ndarray, k: int, device: torch.device | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """`bench.util.knn.knn`: each row's k nearest other rows (at most N - 1), (squared
    distances, indices), by faiss on the CPU (`device` None) or by torch on `device`
    (`search_device`)."""
    if device is None:
        return knn(x, k)
    rows = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(device)
    return tuple(a.cpu().numpy() for a in torch_neighbours(rows, min(k, len(x) - 1)))
