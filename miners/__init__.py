"""Miners (of triplets, or of pairs as `hdc`), one file each, registered by name."""

from miners import (  # noqa: F401
    all_triplets,
    batch_hard,
    centroid_hard_negative,
    easy_positive,
    hdc,
    semihard,
)
from miners.registry import MINERS, build_miner, get_miner_class, miner_names, pml_miner_names

__all__ = ["MINERS", "build_miner", "get_miner_class", "miner_names", "pml_miner_names"]
