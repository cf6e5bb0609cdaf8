"""The embedding health's three costly parts in torch on a run's device (issue 44): on a GPU
the raw inputs' baseline at 3,072 dimensions spent seconds of the run's start on the CPU
(4,000 points: 5 s on 2 cores, about half of it the covariance's eigenvalues), with the GPU
idle. The same sums as `bench.evaluation.health`, in float64, a chunk of rows or pairs at a
time; the numbers agree with the CPU's to float64 rounding, except that the closest class means
are the pair nearest in float64 where the CPU takes faiss's float32 nearest (the same pair
unless two pairs lie within float32 rounding of each other). A run on the CPU does not come
here: its numbers stay as they were, to the bit."""

from __future__ import annotations

import numpy as np
import torch

from bench.util import torch_knn
from bench.util.arrays import CHUNK_VALUES, chunks, row_chunks


class DeviceHealth:
    """One embedding held on `device`, and the health's parts computed there."""

    def __init__(self, x: np.ndarray, device: torch.device) -> None:
        self.rows = torch.from_numpy(np.ascontiguousarray(x)).to(device)

    @property
    def device(self) -> torch.device:
        return self.rows.device

    @torch.no_grad()
    def spectrum(self) -> np.ndarray:
        """`health.variance_spectrum`: the variances along the principal axes, largest first."""
        x = self.rows
        n, dims = x.shape
        mean = sum(x[rows].double().sum(0) for rows in row_chunks(x)) / n
        if n >= dims:
            gram = torch.zeros(dims, dims, dtype=torch.float64, device=self.device)
            for rows in row_chunks(x):
                centred = x[rows].double() - mean
                gram.addmm_(centred.T, centred)
        else:
            centred = x.double() - mean
            gram = centred @ centred.T
        values = torch.linalg.eigvalsh(gram).clamp_min(0.0).flip(0)
        return values.cpu().numpy() / max(n - 1, 1)

    @torch.no_grad()
    def pair_distances(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """`health.pair_distances`: the distances of rows i[p] and j[p] (their difference in
        the rows' own type, squared and summed in float64)."""
        i, j = (torch.from_numpy(np.asarray(a, dtype=np.int64)).to(self.device) for a in (i, j))
        out = torch.empty(len(i), dtype=torch.float64, device=self.device)
        for pairs in chunks(len(i), self.rows.shape[1], CHUNK_VALUES):
            d = (self.rows[i[pairs]] - self.rows[j[pairs]]).double()
            out[pairs] = d.square().sum(1).sqrt()
        return out.cpu().numpy()

    @torch.no_grad()
    def closest_centroids(self, labels: np.ndarray) -> float:
        """`health.closest_centroids`: the distance between the two closest class means."""
        classes, codes, counts = np.unique(labels, return_inverse=True, return_counts=True)
        if len(classes) < 2:
            return float("nan")
        codes = torch.from_numpy(codes.astype(np.int64)).to(self.device)
        sums = self.rows.new_zeros((len(classes), self.rows.shape[1]), dtype=torch.float64)
        for rows in row_chunks(self.rows):
            sums.index_add_(0, codes[rows], self.rows[rows].double())
        centroids = sums / torch.from_numpy(counts).to(sums)[:, None]
        nearest = torch_knn.torch_knn(centroids.float(), 1)[:, 0]  # each mean's nearest, in float32
        return float((centroids - centroids[nearest]).norm(dim=1).min())
