"""Each query's R@K, R-Precision and AP@R from an exact search in torch on a device
(bench.util.torch_knn): the path of `retrieval.query_scores` and `retrieval.gallery_scores`
when they are given a device (issue 44: on a GPU, faiss on the CPU took 36 s where torch on
the GPU took 0.4 s).

Queries are searched in chunks of like R (sorted by it), each chunk for its own largest R (at
least the largest K), at most `cells` distances at a time (256 MiB of them; up to 2 GiB on a
GPU), so that a class of 100,000 fits; the hits and AP@R are computed on the device, AP@R's
sums in float64. A query is excluded from its own results by index, so its duplicates still
count, as on the CPU."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from tqdm import tqdm

from bench.util.torch_knn import TorchSearch, chunk_rows, chunks, device_cells


def device_scores(
    queries: np.ndarray,
    query_codes: np.ndarray,
    base: np.ndarray,
    base_codes: np.ndarray,
    r: np.ndarray,
    exclude_self: bool,
    device: str | torch.device,
    ks: Sequence[int],
    bar: tqdm | None = None,
    cells: int | None = None,
) -> np.ndarray:
    """R@K (for each K of `ks`), R-Precision and AP@R of each query in `base` (with
    `exclude_self`, base row i is query i), a row each in that order (the names:
    `retrieval.score_names`); R: each query's matches in the base. NaN R-Precision and AP@R
    where R is 0; `cells`: distances a chunk holds (default: `device_cells`)."""
    search = TorchSearch(base, device)
    extra = int(exclude_self)
    top = min(max(ks), len(base) - extra)
    need = np.minimum(np.maximum(r, top), len(base) - extra)
    order = np.argsort(need, kind="stable")
    on = search.device
    q = torch.from_numpy(np.ascontiguousarray(queries, dtype=np.float32)).to(on)
    q_codes = torch.from_numpy(np.asarray(query_codes)).to(on)
    b_codes = torch.from_numpy(np.asarray(base_codes)).to(on)
    r_all = torch.from_numpy(np.asarray(r)).to(on)
    ordered = torch.from_numpy(order).to(on)
    # Everything a chunk needs is on the device from here, and its scores stay there until the
    # end: a copy to or from the host in each chunk would wait for the GPU to finish.
    found = torch.empty((len(ks) + 2, len(q)), dtype=torch.float64, device=on)
    with torch.no_grad():
        for start, stop in chunks(len(q), chunk_rows(len(base), cells or device_cells(on))):
            rows = ordered[start:stop]
            exclude = rows if exclude_self else None
            k_chunk = int(need[order[start:stop]].max())
            _, idx = search.nearest(q[rows], k_chunk, exclude)
            same = b_codes[idx] == q_codes[rows, None]
            for i, k in enumerate(ks):
                found[i, rows] = same[:, :k].any(1).double()
            found[-2:, rows] = torch.stack(precision_and_ap(same, r_all[rows]))
            if bar is not None:
                bar.update(stop - start)
    return found.cpu().numpy()


def precision_and_ap(same: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """R-Precision and AP@R of each row of `same` (neighbours nearest first, at least R of
    them), in float64; NaN where R is 0."""
    ranks = torch.arange(1, same.shape[1] + 1, device=same.device, dtype=torch.float64)
    hits = (same & (ranks[None, :] <= r[:, None])).double()
    precision = hits.cumsum(1) / ranks
    total = (precision * hits).sum(1)
    nan = torch.full_like(total, float("nan"))
    per_r = r.clamp_min(1)
    return (
        torch.where(r > 0, hits.sum(1) / per_r, nan),
        torch.where(r > 0, total / per_r, nan),
    )
