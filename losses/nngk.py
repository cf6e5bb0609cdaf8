"""Nearest-neighbour Gaussian kernel loss and classifier (Meyer, Harwood, Drummond, ICIP 2018).

Every training example's embedding is a Gaussian kernel centre, kept in a bank that is
recomputed (network in eval mode) before training and every `update_interval` epochs. Each
training example keeps a list of its k nearest centres (its own excluded), found with faiss at
each refresh. The loss of x with label R is Eq. 3's negative log-probability

    -ln( sum_{i in N, y_i = R} w_i f(x, c_i) / sum_{j in N} w_j f(x, c_j) ),
    f(x, c) = exp(-||x - c||^2 / (2 sigma^2)),

computed with logsumexp over log w_i - ||x - c_i||^2 / (2 sigma^2), so it never overflows or
underflows. Gradients reach x and the weights (w = exp(log_w) > 0), never the stored centres.

The paper's sigma (10 to 30 for 64- to 1024-d GoogLeNet embeddings, about 100 for VGG16's 4096)
is an absolute width: the network learns an embedding scale that suits it. When the kernels of
a neighbour list barely differ (sigma far above the distances, as with a small network at a
small learning rate), the softmax of Eq. 3 is nearly uniform and the loss hardly learns: each
epoch records the mean spread of ||x - c||^2 / (2 sigma^2) over a list, and `warnings` reports
it when the last epoch was flat. (A sigma re-set at every refresh to the median neighbour
distance was tried and learned less: the loss becomes scale-free, and the network can no
longer sharpen its kernels by growing the embedding; see issue 14's note.)

When none of an example's k neighbours has its label (its class lies far away, or k is small),
the numerator would be empty and the loss infinite. Then the farthest neighbour of its list is
replaced by its nearest centre of its own class, so the loss stays finite and pulls x toward its
class. An example whose class has no other training example has no such centre and contributes
no loss.

The neighbour lists come from exact search, as the paper's; on the CPU from ANN_MIN_BANK
training examples on (index "auto"), or with index "ivf", from an approximate IVF index probing
`nprobe` lists. Its recall@k against exact search, measured on a sample at each refresh, is
logged, recorded each epoch as `neighbour_recall`, and reported by `warnings` below
RECALL_WARNING. On a GPU, "auto" searches exactly there at any size (docs/speed.md, "Large NNGK
banks", has the measurements); "ivf" stays the IVF.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from bench.util.knn import approximate_knn, knn, search, uses_gpu
from bench.util.progress import log
from bench.util.torch_knn import search_device, torch_knn
from losses.base import BenchLoss
from losses.registry import register_loss

FLAT_SPREAD = 0.1  # below this spread of the kernel exponents a list's softmax is ~uniform
INDEXES = ("exact", "ivf", "auto")
ANN_MIN_BANK = 100_000  # "auto" searches banks of this size on with the IVF index
RECALL_WARNING = 0.95  # an IVF neighbour recall below this is reported


GATHER_FLOATS = 2**20  # centres gathered at once on a CPU: about 4 MB, so they stay in cache


class NeighbourDot(torch.autograd.Function):
    """x_b . c_j for each row b of x (B, d) and its neighbours j = nbr[b] (B, k), with the
    gradient to x only (the centres are a buffer). Neither pass keeps a B x k x d tensor: the
    forward gathers the centres of a few rows at a time (all of them on a GPU) for a batched
    product; the backward, sum_j g_bj c_j, is one `embedding_bag` (a fused gather and weighted
    sum)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, centres: torch.Tensor, nbr: torch.Tensor) -> torch.Tensor:
        k, d = nbr.shape[1], x.shape[1]
        rows = len(x) if x.is_cuda else max(1, GATHER_FLOATS // (k * d))
        out = x.new_empty(nbr.shape)
        for start in range(0, len(x), rows):
            part = slice(start, start + rows)
            out[part] = torch.bmm(centres[nbr[part]], x[part].unsqueeze(2)).squeeze(2)
        ctx.save_for_backward(centres, nbr)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        centres, nbr = ctx.saved_tensors
        weights = grad.contiguous()
        grad_x = nn.functional.embedding_bag(nbr, centres, per_sample_weights=weights, mode="sum")
        return grad_x, None, None


def neighbour_sq_distances(
    x: torch.Tensor, centres: torch.Tensor, centre_norms: torch.Tensor, nbr: torch.Tensor
) -> torch.Tensor:
    """||x_b - c_j||^2 for each row b of x (B, d) and its neighbours j = nbr[b] (B, k), as
    |x|^2 + |c|^2 - 2 x.c without a B x k x d difference tensor (see NeighbourDot)."""
    dot = NeighbourDot.apply(x, centres, nbr)
    return (x.pow(2).sum(1, keepdim=True) + centre_norms[nbr] - 2.0 * dot).clamp_min(0.0)


def kernel_logits(d2: torch.Tensor, log_weights: torch.Tensor, sigma: float) -> torch.Tensor:
    """log(w_i f(x, c_i)) from squared distances (B, k) and the centres' log-weights (B, k)."""
    return log_weights - d2 / (2.0 * sigma**2)


def nearest_same_class(centres: torch.Tensor, labels: torch.Tensor, rows: torch.Tensor):
    """For each row index, its nearest other centre of the same label (-1 if there is none)."""
    out = torch.full((len(rows),), -1, dtype=torch.long)
    for cls in labels[rows].unique():
        members = torch.nonzero(labels == cls).squeeze(1)
        sel = rows[labels[rows] == cls]
        d = torch.cdist(centres[sel], centres[members])
        d[sel.unsqueeze(1) == members.unsqueeze(0)] = float("inf")
        best = d.argmin(dim=1)
        found = torch.isfinite(d.gather(1, best.unsqueeze(1)).squeeze(1))
        pos = torch.nonzero(labels[rows] == cls).squeeze(1)
        out[pos] = torch.where(found, members[best], torch.full_like(best, -1))
    return out


@register_loss("nngk")
class NNGKLoss(BenchLoss):
    """NNGK loss over a bank of training-set centres with learned per-centre weights."""

    sources = {
        "sigma": (
            "Meyer et al. 2018 §3.1: 'values between 10 and 30 work well' (presets: 10 to 30 by "
            "size for a"
            " pretrained network, 1 for one trained from scratch)"
        ),
        "k": "Meyer et al. 2018 §3.1: 'We use 100 nearest neighbours'",
        "update_interval": (
            "Meyer et al. 2018 §3.1: 'an update interval of 10 epochs' (presets: every epoch for "
            "a network"
            " trained from scratch)"
        ),
        "learn_weights": (
            "Meyer et al. 2018 §2.1: weights 'learned end-to-end' (fixed at one: the Table 5 "
            "ablation)"
        ),
        "index": (
            "chosen here for large banks: exact search below 100,000 training examples, as the"
            " paper's; an IVF index (faiss IVF-Flat, ~4 sqrt(N) lists) from there on"
        ),
        "nprobe": (
            "chosen here: IVF lists probed per query; recall@100 0.998 and 0.977, 3x and 4.7x"
            " faster than exact, on 50,000 and 200,000 points (nngk-bench speed, 2 CPU cores)"
        ),
    }
    search_space = {"sigma": ("log", 0.1, 30.0), "k": ("int", 20, 200)}

    needs_indices = True

    def __init__(
        self,
        num_train: int,
        dims: int,
        sigma: float = 10.0,
        k: int = 100,
        update_interval: int = 10,
        learn_weights: bool = True,
        index: str = "auto",
        nprobe: int = 16,
    ):
        super().__init__()
        if num_train < 2:
            raise ValueError("NNGK needs at least 2 training examples")
        if sigma <= 0 or k < 1 or update_interval < 1:
            raise ValueError(
                f"NNGK needs sigma > 0, k >= 1 and update_interval >= 1; got sigma={sigma}, "
                f"k={k}, update_interval={update_interval}"
            )
        if index not in INDEXES or nprobe < 1:
            raise ValueError(
                f"NNGK index is one of {', '.join(INDEXES)} and nprobe >= 1; got "
                f"index={index!r}, nprobe={nprobe}"
            )
        self.index = index
        self.approximate = index == "ivf" or (index == "auto" and num_train >= ANN_MIN_BANK)
        self.nprobe = int(nprobe)
        self._recall: float | None = None  # of the lists of the last refresh, when approximate
        self.sigma = float(sigma)
        self.k = min(int(k), num_train - 1)
        if self.k < k:
            log.warning(
                f"NNGK: k={k} exceeds the {num_train - 1} other training items; using k={self.k}"
            )
        self.refresh_interval = int(update_interval)
        self.log_weights = nn.Parameter(torch.zeros(num_train), requires_grad=learn_weights)
        self.register_buffer("centres", torch.zeros(num_train, dims))
        self.register_buffer("centre_labels", torch.zeros(num_train, dtype=torch.long))
        self.register_buffer("neighbours", torch.zeros(num_train, self.k, dtype=torch.long))
        self.register_buffer("refreshed", torch.tensor(False))
        # sum distance, sum kernel, sum exponent spread, distances, lists: kept on the
        # embeddings' device and read once an epoch, so that a step never waits for the GPU
        self._stats = torch.zeros(5, dtype=torch.float64)
        self._flat: float | None = None
        self._bank_changed()
        self.register_load_state_dict_post_hook(NNGKLoss._bank_changed)

    def _bank_changed(self, *_: object) -> None:
        """After a refresh or a loaded checkpoint: the centres' squared norms are computed
        again when next needed, and whether the bank is ready is read once, not every step."""
        self._norms: torch.Tensor | None = None
        self._ready = bool(self.refreshed)

    def centre_norms(self) -> torch.Tensor:
        if self._norms is None or self._norms.device != self.centres.device:
            self._norms = self.centres.pow(2).sum(1)
        return self._norms

    @torch.no_grad()
    def refresh(self, embeddings: torch.Tensor, labels: torch.Tensor) -> None:
        """Store the current training embeddings as centres and recompute neighbour lists."""
        if self.searches_on(embeddings.device):
            nbr = torch_knn(embeddings.detach().float(), self.k).cpu()
        else:  # faiss on the CPU, as it always has
            nbr = torch.from_numpy(self._nearest(embeddings.detach().float().cpu().numpy()))
        emb = embeddings.detach().float().cpu()
        labels = labels.detach().long().cpu()
        nbr = nbr.long()
        lacking = torch.nonzero(~(labels[nbr] == labels.unsqueeze(1)).any(dim=1)).squeeze(1)
        if len(lacking):
            nearest = nearest_same_class(emb, labels, lacking)
            has = nearest >= 0
            nbr[lacking[has], -1] = nearest[has]
        self.centres.copy_(emb)
        self.centre_labels.copy_(labels)
        self.neighbours.copy_(nbr)
        self.refreshed.fill_(True)
        self._bank_changed()

    def searches_on(self, device: torch.device) -> bool:
        """Whether the neighbour lists are found with torch on the embeddings' device (a GPU's,
        exact search, for index exact or auto): else with faiss on the CPU, as always."""
        return search_device(device) is not None and self.index != "ivf"

    def _nearest(self, emb: np.ndarray) -> np.ndarray:
        """The k nearest other centres of each centre: exact, or from the IVF index (its
        recall kept and logged)."""
        if not self.approximate:
            return knn(emb, self.k)[1]
        _, idx, self._recall = approximate_knn(emb, self.k, nprobe=self.nprobe)
        where = "GPU" if uses_gpu() else "CPU"
        log.info(
            f"NNGK refresh: IVF neighbour lists of {len(emb)} centres (nprobe {self.nprobe}, "
            f"faiss on the {where}), recall@{self.k} {self._recall:.4f} on a sample"
        )
        return idx

    def forward(self, embeddings, labels, indices=None):
        if indices is None or not self._ready:
            raise RuntimeError("NNGKLoss needs dataset indices and a refresh() before training")
        nbr = self.neighbours[indices.to(self.neighbours.device)]
        centres, norms = self.centres.to(embeddings), self.centre_norms().to(embeddings)
        d2 = neighbour_sq_distances(embeddings, centres, norms, nbr)
        self._record(d2.detach())
        logits = kernel_logits(d2, self.log_weights[nbr], self.sigma)
        same = self.centre_labels[nbr] == labels.to(nbr.device).unsqueeze(1)
        valid = same.any(dim=1)
        # A row without a same-label neighbour takes its whole list as numerator: it adds 0 to
        # the loss and its gradient, with no branch on the host (which would wait for the GPU).
        same = same | ~valid.unsqueeze(1)
        numerator = torch.logsumexp(logits.masked_fill(~same, float("-inf")), dim=1)
        denominator = torch.logsumexp(logits, dim=1)
        return (denominator - numerator).sum() / valid.sum().clamp_min(1)

    def class_probabilities(self, queries, train, train_labels, num_classes):
        """Eq. 3 over the given training embeddings as centres, with the learned weights."""
        return nngk_class_probabilities(
            queries, train, train_labels, self.log_weights, self.sigma, self.k, num_classes
        )

    @torch.no_grad()
    def _record(self, d2: torch.Tensor) -> None:
        exponent = d2 / (2.0 * self.sigma**2)
        spread = exponent.max(dim=1).values - exponent.min(dim=1).values
        step = torch.stack(
            [
                d2.sqrt().sum(),
                torch.exp(-exponent).sum(),
                spread.sum(),
                d2.new_full((), float(d2.numel())),  # filled there: no copy from the host
                d2.new_full((), float(len(d2))),
            ]
        )
        if self._stats.device != d2.device:
            self._stats = self._stats.to(d2.device)
        self._stats += step.double()

    def epoch_stats(self) -> dict[str, float]:
        """Fig. 4b, 4c: mean distance and mean kernel value (Eq. 1) from the training examples
        to the centres of their neighbour lists (k nearest at the last refresh), this epoch;
        and the mean spread of the kernel exponents over a list. With the IVF index, also the
        recall@k of the lists in use (those of the last refresh) against exact search."""
        total_d, total_k, total_spread, count, lists = self._stats.tolist()
        self._stats.zero_()
        stats = {} if self._recall is None else {"neighbour_recall": self._recall}
        if not count:
            return stats
        spread = total_spread / lists
        self._flat = spread if spread < FLAT_SPREAD else None
        return {
            "mean_centre_distance": total_d / count,
            "mean_kernel_value": total_k / count,
            "kernel_exponent_spread": spread,
            **stats,
        }

    def warnings(self) -> list[str]:
        found = []
        if self._flat is not None:
            found.append(
                f"NNGK kernels are flat (exponents of a neighbour list differ by {self._flat:.3g}"
                f" on average at sigma {self.sigma:g}): the loss can hardly learn; use a smaller"
                " --sigma"
            )
        if self._recall is not None and self._recall < RECALL_WARNING:
            found.append(
                f"NNGK neighbour lists from the IVF index have recall@{self.k} {self._recall:.3f}"
                f" (below {RECALL_WARNING}): raise nprobe (now {self.nprobe}) or use index exact"
            )
        return found


@torch.no_grad()
def nngk_class_probabilities(
    queries: torch.Tensor,
    centres: torch.Tensor,
    centre_labels: torch.Tensor,
    log_weights: torch.Tensor,
    sigma: float,
    k: int,
    num_classes: int,
) -> torch.Tensor:
    """Eq. 3: class probabilities of each query from its k nearest training centres."""
    queries, centres = queries.detach().float().cpu(), centres.detach().float().cpu()
    _, idx = search(centres.numpy(), queries.numpy(), k)
    nbr = torch.from_numpy(idx.astype(np.int64))
    d2 = neighbour_sq_distances(queries, centres, centres.pow(2).sum(1), nbr)
    weights = torch.softmax(kernel_logits(d2, log_weights.detach().cpu()[nbr], sigma), dim=1)
    probs = torch.zeros(len(queries), num_classes)
    probs.scatter_add_(1, centre_labels.cpu()[nbr], weights)
    return probs
