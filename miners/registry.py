"""Miners by name, filled by the `register_miner` decorator; and any miner class of the
installed pytorch-metric-learning as `pml:ClassName` (issue 46)."""

from __future__ import annotations

import inspect
from typing import Any

from torch import nn

from bench.util.registry import PML_PREFIX, Registry, exported_classes, prefixed_class

MINERS = Registry("miner")
register_miner = MINERS.register
miner_names = MINERS.names

# Classes of PML's miner module that mine nothing in a labelled batch, with the reason.
NOT_MINERS = {
    "BaseMiner": "the base class of PML's miners",
    "EmbeddingsAlreadyPackagedAsTriplets": "for batches laid out as anchor, positive, negative "
    "in turn, which the harness's batches are not",
}


def pml_miner_classes() -> dict[str, type]:
    """The miner classes PML's miner module exports, by name, those that mine nothing too."""
    from pytorch_metric_learning import miners

    return exported_classes(miners, miners.BaseMiner)


def pml_miner_names() -> list[str]:
    """`pml:Name` of every miner class of the installed PML that mines a labelled batch."""
    return [PML_PREFIX + n for n in pml_miner_classes() if n not in NOT_MINERS]


def get_miner_class(name: str) -> type:
    """A registered miner, or PML's miner class of `pml:Name`; a ValueError naming them."""
    if not name.startswith(PML_PREFIX):
        return MINERS.get_class(name)
    registered = f"a registered one ({', '.join(miner_names())})"
    choices = f"{registered} or one of pytorch-metric-learning's: {', '.join(pml_miner_names())}"
    return prefixed_class("miner", name, pml_miner_classes(), NOT_MINERS, choices)


def build_miner(name: str, margin: float | None = None, **params: Any) -> nn.Module:
    """A miner with `params`; one that takes a margin gets the loss's own where given (PML's
    miner default differs from it), the others their defaults. A miner that needs refreshing
    from the whole training set is refused: the losses that take `--miner` do not refresh it."""
    cls = get_miner_class(name)
    if hasattr(cls, "refresh"):  # a loss of its own refreshes it: contrastive-centroid's
        raise ValueError(
            f"the miner {name} mines from the class centroids of the whole training set, which "
            "only --loss contrastive-centroid computes (with this loss it would draw any "
            "negative); use that loss, or another --miner"
        )
    takes_margin = "margin" in inspect.signature(cls.__init__).parameters
    given = {"margin": margin} if margin is not None and takes_margin else {}
    return cls(**given, **params)
