"""What the harness knows of a loss class of pytorch-metric-learning beyond its signature, by
the class's name (issue 67): written once, it holds for `pml:Name` and for the curated name
declared over the same class alike (losses/pml_adapter.py), so the two cannot drift. A class
without an entry is run as its signature and default distance say."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from pytorch_metric_learning.distances import CosineSimilarity, DotProductSimilarity


@dataclass(frozen=True)
class Fix:
    """`examples_per_class`: the batch it needs (N-pair: N classes x 2); `normalize_embeddings`:
    whether the evaluated embedding is normalised, where the default distance misleads (None:
    read from it); `lr_multiplier`: the multiple of the learning rate its own weights train at;
    `arguments`: constructor arguments made from its parameters (by PML's names), e.g. a
    distance; `regularizer_args`: given to a regularizer that names them; `prepare`: what is
    done to (embeddings, labels) before PML's loss; `quiet`: PML warnings not shown."""

    examples_per_class: int | None = None
    normalize_embeddings: bool | None = None
    lr_multiplier: float = 1.0
    arguments: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    regularizer_args: dict[str, Any] = field(default_factory=dict)
    prepare: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None
    quiet: tuple[str, ...] = ()


class BinnedCosine(CosineSimilarity):
    """Cosine similarity kept in [-1, 1 - delta / 1000]: PML 2.9 puts a similarity s into the
    bin floor((s + 1) / delta), so one of 1 (an example drawn twice in a batch) or one just
    outside [-1, 1] (rounding) falls outside its histogram: an index out of bounds."""

    def __init__(self, delta: float):
        super().__init__()
        self.top = 1.0 - delta / 1000

    def compute_mat(self, query_emb: torch.Tensor, ref_emb: torch.Tensor) -> torch.Tensor:
        return super().compute_mat(query_emb, ref_emb).clamp(-1.0, self.top)


def binned_cosine(params: dict[str, Any]) -> dict[str, Any]:
    """HistogramLoss's distance for its bin width (delta = 2 / n_bins; PML's 100 bins unset)."""
    delta = params.get("delta") or 2 / (params.get("n_bins") or 100)
    return {"distance": BinnedCosine(delta)}


def class_blocks(
    embeddings: torch.Tensor, labels: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch reordered to put each class's examples together, and the labels under which
    PML 2.9's SmoothAPLoss takes those runs for the classes.

    PML cuts the batch into consecutive blocks of (batch size / number of classes) examples and
    takes each block for a class: a block is a class only where the batch has as many classes
    as examples of each. Labels of m values, each C times (C classes of m), make its blocks m
    long."""
    classes, counts = torch.unique(labels, return_counts=True)
    if len(counts.unique()) != 1:
        raise ValueError(
            "smooth-ap needs the same number of examples of each class in a batch (class-"
            f"balanced batches); got {sorted(counts.tolist())}"
        )
    order = torch.argsort(labels, stable=True)
    blocks = torch.arange(len(labels), device=labels.device) // len(classes)
    return embeddings[order], blocks


def on_the_sphere(embeddings: torch.Tensor, labels: torch.Tensor):
    return F.normalize(embeddings, dim=1), labels


FIXES = {
    # Sohn 2016's N-pair: a pair of each class (PML takes one, so more would go unused), raw
    # inner products (PML's default distance normalises them) and a squared-norm regularizer.
    "NPairsLoss": Fix(
        examples_per_class=2,
        normalize_embeddings=False,
        arguments=lambda _: {"distance": DotProductSimilarity(normalize_embeddings=False)},
        regularizer_args={"power": 2},
    ),
    # Its logits carry |W_j| |x|: it does not work on the unit sphere (SphereFace's, |x| alone,
    # decide on angles).
    "LargeMarginSoftmaxLoss": Fix(normalize_embeddings=False),
    # PML normalises the anchor and positive but takes the negatives as given, where Wang et
    # al. 2017's formula has every embedding on the sphere.
    "AngularLoss": Fix(prepare=on_the_sphere),
    "HistogramLoss": Fix(arguments=binned_cosine, quiet=("Using a non-tuple sequence",)),
    # PML warns of overflow above 5; on the unit sphere T (alpha - d) <= T alpha, which exp
    # keeps finite in the fp32 the trainer computes losses in.
    "RankedListLoss": Fix(quiet=("Values of Tp or Tn are too high",)),
    "SmoothAPLoss": Fix(prepare=class_blocks),
    # The authors' released code trains the proxies (Kim et al. 2020) and the centres (Qian et
    # al. 2019) at 100x the network's learning rate.
    "ProxyAnchorLoss": Fix(lr_multiplier=100.0),
    "SoftTripleLoss": Fix(lr_multiplier=100.0),
}


def fix_of(pml_class: type) -> Fix:
    """The class's own entry (not a base's: ArcFace is PML's subclass of L-Softmax)."""
    return FIXES.get(pml_class.__name__, Fix())


@contextlib.contextmanager
def quiet(messages: tuple[str, ...]) -> Iterator[None]:
    if not messages:
        yield
        return
    with warnings.catch_warnings():
        for message in messages:
            warnings.filterwarnings("ignore", message)
        yield
