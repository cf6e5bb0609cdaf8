"""What every loss declares to the shared trainer."""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from bench.util.knn import search
from losses.domains import Domain

KNN_VOTES = 10
# The report's groups of losses, in its order: the source papers' (NNGK and the losses it was
# compared with), proxy-based, pair weighting, classification / angular, ranking; and the
# classes of pytorch-metric-learning run by name (losses/pml_adapter.py), undeclared.
FAMILIES = ("paper", "proxy", "pair weighting", "classification", "ranking", "pml (generic)")


class BenchLoss(nn.Module):
    """Base class of the harness's losses.

    The trainer reads only these declarations; it has no per-loss branches:
    - `class_balanced`: batches come from PML's MPerClassSampler, with `examples_per_class`
      examples of each class where the loss needs a number (N-pair: a pair per class; None:
      the preset's m_per_class; the run's --m-per-class overrides both);
    - `needs_indices`: `forward` receives the dataset indices of the batch;
    - `normalize_embeddings`: the loss works on the unit sphere, so the evaluated embedding is
      L2-normalised too;
    - `refresh_interval`: when not None, `refresh` is called with the embeddings of the whole
      training set (eval mode) before training and every `refresh_interval` epochs;
    - parameters of the module (weights, a classifier, proxies) are optimised with the
      network, at `lr_multiplier` times its learning rate (in an optimizer group of their own
      when that is not 1; `sources["lr_multiplier"]` says where the value comes from);
    - `memory_ok`: a PML pair or triplet loss that takes a cross-batch memory (`--memory N`,
      losses/memory.py);
    - `family`: its group in the report (one of `FAMILIES`);
    - `pml_class`: the PML loss class it hands its parameters to, whose declared domains
      (losses/domains.py) they share, under PML's names where `pml_names` renames one;
      `domains`: those of its parameters of its own. The command line checks the parameters
      given against them before anything loads.
    """

    # Where each default parameter value comes from: a source document, PML, or "chosen here".
    sources: ClassVar[dict[str, str]] = {}
    # What `tune` searches beside the learning rate and weight decay: name -> (kind, low,
    # high), kind "float" (uniform), "log" (log-uniform) or "int".
    search_space: ClassVar[dict[str, tuple[str, float, float]]] = {}
    class_balanced: ClassVar[bool] = False
    examples_per_class: ClassVar[int | None] = None
    needs_indices: ClassVar[bool] = False
    normalize_embeddings: ClassVar[bool] = False
    refresh_interval: int | None = None
    lr_multiplier: ClassVar[float] = 1.0
    memory_ok: ClassVar[bool] = False
    family: ClassVar[str] = "paper"
    pml_class: ClassVar[type | None] = None
    pml_names: ClassVar[dict[str, str]] = {}
    domains: ClassVar[dict[str, Domain]] = {}

    def refresh(self, embeddings: torch.Tensor, labels: torch.Tensor) -> None:
        """Update state that depends on the embeddings of the whole training set."""

    def forward(
        self, embeddings: torch.Tensor, labels: torch.Tensor, indices: torch.Tensor | None = None
    ) -> torch.Tensor:
        raise NotImplementedError

    @torch.no_grad()
    def class_probabilities(
        self,
        queries: torch.Tensor,
        train: torch.Tensor,
        train_labels: torch.Tensor,
        num_classes: int,
    ) -> torch.Tensor:
        """Class probabilities of embedded queries (the classify protocol's classifier).

        By default a vote of the `KNN_VOTES` nearest training embeddings; losses with a
        classifier of their own (softmax, NNGK) override it."""
        _, idx = search(train.cpu().numpy(), queries.cpu().numpy(), KNN_VOTES)
        votes = torch.as_tensor(train_labels.cpu().numpy()[idx])
        probs = torch.zeros(len(queries), num_classes)
        probs.scatter_add_(1, votes, torch.ones(votes.shape))
        return probs / probs.sum(dim=1, keepdim=True)

    def epoch_stats(self) -> dict[str, float]:
        """Extra per-epoch values to record in the run's history."""
        return {}

    def warnings(self) -> list[str]:
        """What went wrong in the epoch `epoch_stats` just summed up (e.g. flat kernels)."""
        return []


class PMLLoss(BenchLoss):
    """A pytorch-metric-learning loss (and optional miner) behind the harness's interface."""

    def __init__(self, loss: nn.Module, miner: nn.Module | None = None):
        super().__init__()
        self.loss = loss
        self.miner = miner

    def forward(self, embeddings, labels, indices=None):
        tuples = self.miner(embeddings, labels) if self.miner is not None else None
        return self.loss(embeddings, labels, tuples)
